//go:build linux

package allocs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestGoAllocations profiles goalloc, started after the Manager, for 6 s
// after 2 s of warm-up: allocBig allocates 3 bytes for each of
// allocSmall's, so 75 ± 5% of the alloc_space of the two is allocBig's;
// the inuse_space of each is within 10% of what the program's own heap
// profile holds live for it (the same sampled objects, freed as the
// runtime sweeps them); every sample of the two carries its {fn} label.
func TestGoAllocations(t *testing.T) {
	testutil.RequireBPF(t)
	// One sampled allocation per 16 KiB (read from the process's memory):
	// ~800 live sampled objects, so that the inuse comparison is not at
	// the mercy of which few the runtime sampled (at the default rate 60:
	// the program's own profile, up to two collections older than the
	// receiver's, then differs from it by up to 20%).
	args := []string{"-rate", "16384"}
	for _, b := range testutil.GoHeapBuilds {
		b.Toolchain = testutil.GoToolchain(b.Toolchain)
		t.Run(b.Name(), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "goalloc")
			require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goalloc"), bin, runtime.GOARCH, b))
			m, err := Open(Options{Proc: procfs.FS{}, Logger: zaptest.NewLogger(t), Go: true, RescanInterval: 200 * time.Millisecond})
			require.NoError(t, err)
			defer m.Close()

			child := testutil.StartChild(t, exec.Command(bin, append([]string{"-duration", "12s", "-per-second", "500"}, args...)...))
			require.Eventually(t, func() bool { return m.Stats().Processes > 0 }, 10*time.Second, 50*time.Millisecond)
			time.Sleep(2 * time.Second)
			m.Drain() // warm-up: objects allocated before the probes
			time.Sleep(6 * time.Second)
			w := m.Drain()
			truth := parseProfileLine(t, child.Pending())
			st := m.Stats()
			t.Logf("stats %+v", st)

			fns := functionRanges(t, bin)
			pid := uint32(child.Pid())
			alloc := sumBy(t, w.AllocSpace, pid, fns, true)
			inuse := sumBy(t, w.InuseSpace, pid, fns, false)
			share := float64(alloc["big"]) / float64(alloc["big"]+alloc["small"])
			t.Logf("alloc_space big %d small %d (%.3f big); inuse_space big %d small %d; the program's own: %v",
				alloc["big"], alloc["small"], share, inuse["big"], inuse["small"], truth)
			require.InDelta(t, 0.75, share, 0.05, "alloc_space split")
			for _, fn := range []string{"big", "small"} {
				want := float64(truth[fn+"_inuse"])
				require.InEpsilon(t, want, float64(inuse[fn]), 0.10, "inuse_space of %s against its heap profile's", fn)
			}
			require.Zero(t, st.RingbufFull)
			require.Zero(t, st.Refused)
			_ = child.Kill(10 * time.Second)
		})
	}
}

// parseProfileLine returns the workload's last profile line's numbers.
func parseProfileLine(t *testing.T, lines []string) map[string]int64 {
	t.Helper()
	return parseLine(t, "profile ", lines)
}

// parseLine returns the numbers (k=v) of the last of lines with prefix.
func parseLine(t *testing.T, prefix string, lines []string) map[string]int64 {
	t.Helper()
	for i := len(lines) - 1; i >= 0; i-- {
		rest, ok := strings.CutPrefix(lines[i], prefix)
		if !ok {
			continue
		}
		out := map[string]int64{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			var n int64
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			out[k] = n
		}
		return out
	}
	t.Fatalf("no %qline in %q", prefix, lines)
	return nil
}

type addrRange struct{ lo, hi uint64 }

// functionRanges returns where allocBig and allocSmall are in bin.
func functionRanges(t *testing.T, bin string) map[string]addrRange {
	t.Helper()
	f, err := os.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	funcs, err := symbolize.FindFunctions(f, func(n string) bool { return n == "main.allocBig" || n == "main.allocSmall" })
	require.NoError(t, err)
	out := map[string]addrRange{}
	for _, s := range funcs.Symbols {
		out[strings.ToLower(strings.TrimPrefix(s.Name, "main.alloc"))] = addrRange{s.Value, s.Value + s.Size}
	}
	require.Len(t, out, 2)
	return out
}

// sumBy sums the values of pid's stacks by the function of fns they pass
// through; labelled: each such stack carries its function's {fn} label.
func sumBy(t *testing.T, stacks []capture.RawStack, pid uint32, fns map[string]addrRange, labelled bool) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, s := range stacks {
		if s.PID != pid {
			continue
		}
		for fn, r := range fns {
			if !passes(s, r) {
				continue
			}
			out[fn] += s.Value
			if labelled {
				require.NotNil(t, s.GoLabels, "%s stack without labels", fn)
				labels, dropped := golabels.Decode(s.GoLabels.Data, nil)
				require.Zero(t, dropped)
				require.Equal(t, map[string]string{"fn": fn}, labels)
			}
		}
	}
	return out
}

func passes(s capture.RawStack, r addrRange) bool {
	for _, f := range s.Frames {
		if f.Address > r.lo && f.Address <= r.hi {
			return true
		}
	}
	return false
}

// A process that execs a Go program after the Manager looked at it (a
// shell, as an image's entry point script) is looked at again on its exec:
// with no rescan in the test's time, its allocations are profiled.
func TestGoAllocationsAfterExec(t *testing.T) {
	testutil.RequireBPF(t)
	bin := filepath.Join(t.TempDir(), "goalloc")
	require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goalloc"), bin, runtime.GOARCH, testutil.GoBuild{}))
	cmd := exec.Command("sh", "-c", `read _; exec "$0" -duration 10s -per-second 200`, bin)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	child := testutil.StartChild(t, cmd)
	defer func() { _ = child.Kill(10 * time.Second) }()
	m, err := Open(Options{Proc: procfs.FS{}, Logger: zaptest.NewLogger(t), Go: true, RescanInterval: time.Hour,
		TargetPIDs: []uint32{uint32(child.Pid())}})
	require.NoError(t, err)
	defer m.Close()
	require.Zero(t, m.Stats().Processes, "the shell is no Go program")
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.Stats().Processes == 1 }, 10*time.Second, 20*time.Millisecond, "exec not followed")
	var allocated uint64
	require.Eventually(t, func() bool {
		for _, s := range m.Drain().AllocSpace {
			if s.PID == uint32(child.Pid()) {
				allocated += s.Value
			}
		}
		return allocated > 0
	}, 10*time.Second, 100*time.Millisecond, "no allocations of the exec'ed program")
}
