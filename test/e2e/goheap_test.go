//go:build linux

package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Go programs allocating 3 bytes in allocBig for each in allocSmall
// (testutil.GoHeapBuilds), started after the collector (memory::go on,
// CPU profiling off): their
// four heap profiles reach OTLP with runtime/pprof's sample types and a
// space/bytes period; alloc_space splits 75 ± 5, stacks start at the
// allocating function (the allocator's runtime frames hidden), all but 1%
// carry their goroutine's {fn} label, and inuse_space is reported.
func TestCollectorGoHeapProfiles(t *testing.T) {
	bin := collectorBinary(t)
	builds := testutil.GoHeapBuilds
	progs := make([]string, len(builds))
	for i, b := range builds {
		progs[i] = testutil.BuildGoWith(t, "goalloc", b)
	}
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(`    report_interval: 2s
    targets: {executables: ['/goalloc[^/]*$']}
    cpu: {enabled: false}
    memory: {go: true}
`, addr))
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "bpfprofiler started") },
		testutil.Patient(120*time.Second), 100*time.Millisecond, "the collector did not start")
	pids := map[int]string{}
	for i, b := range builds {
		// One sampled allocation per 64 KiB: enough samples in 300 MB,
		// which an emulated guest allocates in time too.
		args := []string{"-duration", fmt.Sprint(testutil.Patient(60 * time.Second)), "-per-second", "500", "-rate", "65536"}
		w := testutil.StartWorkloadChild(t, progs[i], args...)
		pids[w.Pid()] = b.Name()
	}
	type sums struct {
		big, small, inuse int64
		unlabelled        int64
		notLeaf           int64
	}
	measure := func() map[int]*sums {
		got := map[int]*sums{}
		for pid := range pids {
			s := &sums{}
			got[pid] = s
			for _, p := range otlp.all() {
				requireHeapPeriods(t, p)
				for _, st := range pdata.Stacks(pdata.OfType(pdata.OfPID(p, pid), "alloc_space")) {
					fn := ""
					for _, f := range st.Functions {
						if f == "main.allocBig" || f == "main.allocSmall" {
							fn = f
							break
						}
					}
					switch fn {
					case "main.allocBig":
						s.big += st.Value
					case "main.allocSmall":
						s.small += st.Value
					default:
						continue
					}
					if st.Functions[0] != fn {
						s.notLeaf += st.Value
					}
					if want := strings.ToLower(strings.TrimPrefix(fn, "main.alloc")); st.Attributes["fn"] != want {
						s.unlabelled += st.Value
					}
				}
				s.inuse += pdata.Total(pdata.OfType(pdata.OfPID(p, pid), "inuse_space"))
			}
		}
		return got
	}
	// Enough of each: 300 MB, ~2400 samples of allocBig's and 900 of
	// allocSmall's (5 s on the host, 10 s in an emulated guest): the
	// share's standard error is under a point.
	var got map[int]*sums
	enough := func() bool {
		got = measure()
		for _, s := range got {
			if s.big+s.small < 300_000_000 || s.inuse == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(testutil.Patient(90 * time.Second)); !enough(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			for pid, s := range got {
				t.Logf("%s: alloc_space allocBig %d allocSmall %d, inuse_space %d", pids[pid], s.big, s.small, s.inuse)
				logHeaviestStacks(t, otlp.all(), pid)
			}
			t.Fatal("too few allocations profiled")
		}
	}
	var figures []string
	for pid, s := range got {
		share := float64(s.big) / float64(s.big+s.small)
		figures = append(figures, fmt.Sprintf("%s %.3f", pids[pid], share))
		t.Logf("%s: alloc_space allocBig %d allocSmall %d (%.3f), inuse_space %d; unlabelled %d, not leaf %d",
			pids[pid], s.big, s.small, share, s.inuse, s.unlabelled, s.notLeaf)
		require.InDelta(t, 0.75, share, 0.05, pids[pid])
		// A label set the kernel could not read goes without (counted,
		// bpfprofiler_memory_losses{reason=labels_lost}): one in 1000
		// samples on Linux 5.10.
		require.LessOrEqual(t, s.unlabelled, (s.big+s.small)/100, "%s: samples without their goroutine's label", pids[pid])
		require.Zero(t, s.notLeaf, "%s: stacks not starting at the allocating function", pids[pid])
	}
	slices.Sort(figures)
	matrixFigure(t, "allocBig's alloc_space share: %s", strings.Join(figures, ", "))
}

// requireHeapPeriods checks that each heap profile of p has a space/bytes
// period, as runtime/pprof's heap profile has.
func requireHeapPeriods(t *testing.T, p pprofile.Profiles) {
	t.Helper()
	dict := p.Dictionary()
	str := func(i int32) string { return dict.StringTable().At(int(i)) }
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				switch typ := str(prof.SampleType().TypeStrindex()); typ {
				case "alloc_objects", "alloc_space", "inuse_objects", "inuse_space":
					require.Equal(t, "space/bytes", str(prof.PeriodType().TypeStrindex())+"/"+str(prof.PeriodType().UnitStrindex()), typ)
					require.Equal(t, int64(524288), prof.Period(), typ)
				}
			}
		}
	}
}

// logHeaviestStacks logs the five heaviest alloc_space stacks of pid.
func logHeaviestStacks(t *testing.T, all []pprofile.Profiles, pid int) {
	t.Helper()
	sums := map[string]int64{}
	for _, p := range all {
		for _, st := range pdata.Stacks(pdata.OfType(pdata.OfPID(p, pid), "alloc_space")) {
			key := strings.Join(st.Functions, " <- ")
			if len(st.Functions) == 0 {
				key = fmt.Sprintf("(no frames: %v)", st.Frames)
			}
			sums[key] += st.Value
		}
	}
	keys := slices.SortedFunc(maps.Keys(sums), func(a, b string) int { return cmp.Compare(sums[b], sums[a]) })
	for _, k := range keys[:min(5, len(keys))] {
		t.Logf("  %d %s", sums[k], k)
	}
}
