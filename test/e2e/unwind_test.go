//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// chainCheck is one call chain of the nofp workload: the samples whose
// leaf is leaf must hold callers in order (others may come between), or
// one of the other orders of alternatives, and end at one of roots. A
// caller "~x" is any function whose name holds x.
type chainCheck struct {
	leaf         string
	callers      []string
	roots        []string
	alternatives [][]string
}

// share returns the share of the samples with leaf c.leaf that are whole,
// their number, and an example of one that is not.
func (c chainCheck) share(received []pprofile.Profiles) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pd) {
			if len(st.Functions) == 0 || st.Functions[0] != c.leaf {
				continue
			}
			all += st.Value
			if c.whole(st.Functions) {
				whole += st.Value
			} else if example == "" {
				example = strings.Join(st.Functions, " <- ")
			}
		}
	}
	return ratio(whole, all), all, example
}

func (c chainCheck) whole(fns []string) bool {
	if !slices.ContainsFunc(fns, func(fn string) bool { return slices.Contains(c.roots, fn) }) {
		return false
	}
	return slices.ContainsFunc(append([][]string{c.callers}, c.alternatives...), func(callers []string) bool {
		i := 0
		for _, fn := range fns[1:] {
			if i < len(callers) && (fn == callers[i] || strings.HasPrefix(callers[i], "~") && strings.Contains(fn, callers[i][1:])) {
				i++
			}
		}
		return i == len(callers)
	})
}

// napperShare returns the share of the off-CPU time in glibc's nanosleep
// (nofp's napper thread, the only one that calls it) whose user stack is
// whole: nap_leaf <- nap_round <- napper <- start_thread; its total and an
// example of a stack that is not.
func napperShare(received []pprofile.Profiles) (float64, int64, string) {
	want := []string{"nap_leaf", "nap_round", "napper", "start_thread"}
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfType(pd, "off_cpu")) {
			if !slices.ContainsFunc(st.Functions, func(fn string) bool { return strings.Contains(fn, "nanosleep") }) {
				continue
			}
			all += st.Value
			i := 0
			for _, fn := range st.Functions {
				if i < len(want) && fn == want[i] {
					i++
				}
			}
			if i == len(want) {
				whole += st.Value
			} else if example == "" {
				example = strings.Join(st.Functions, " <- ")
			}
		}
	}
	return ratio(whole, all), all, example
}

// Code built without frame pointers (nofp.c, -O2 -fomit-frame-pointer)
// comes out of the collector with whole stacks: on CPU through the
// program's own frames, through glibc's qsort and out of a signal handler
// into the frameless leaf it interrupted, off CPU from glibc's nanosleep,
// down to the threads' roots.
func TestCollectorUnwindsWithoutFramePointers(t *testing.T) {
	bin := collectorBinary(t)
	nofp := testutil.BuildC(t, "nofp.c")
	otlp, addr := startOTLPServer(t)
	// Long enough for an emulated guest, whose collector takes 40 s to start
	// while the workload's threads take its one CPU; killed at the end.
	work := testutil.StartChild(t, exec.Command(nofp, strconv.Itoa(int(testutil.Patient(240*time.Second).Seconds()))))

	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 99}
    off_cpu: {enabled: true, min_block: 1ms}
`, work.Pid()), addr))
	waitReady(t, out)

	chain := chainCheck{"chain_leaf", []string{"chain_c", "chain_b", "chain_a", "main"}, []string{"__libc_start_call_main", "__libc_start_main", "_start"}, nil}
	sorter := chainCheck{"compare_slow", []string{"~qsort", "sort_round", "sorter"}, []string{"start_thread", "__clone3", "clone3", "__clone", "clone"}, nil}
	// The signal interrupts the leaf, or, delivered as the thread leaves
	// the kernel, its poll between rounds.
	handler := chainCheck{"handler_burn", []string{"on_signal", "sig_leaf", "sig_loop", "handled"}, sorter.roots,
		[][]string{{"on_signal", "~poll", "handled"}}}
	// The first samples come before the process's tables are loaded (on
	// an emulated kernel that takes a while): the reports of the first 4 s
	// are left out. On an emulated single CPU shared with the workload's
	// busy threads a report has taken 10 s (once in 6.1's matrix run: 5
	// reports in 90 s), and the collector 52 s to start (5.10, its
	// verifier's work), hence the long waits.
	var skip int
	require.Eventually(t, func() bool {
		_, a, _ := chain.share(otlp.all())
		return a > 0
	}, testutil.Patient(120*time.Second), 100*time.Millisecond, "no samples of the workload")
	time.Sleep(4 * time.Second)
	skip = len(otlp.all())
	later := func() []pprofile.Profiles { return otlp.all()[skip:] }
	var a, b, c, d int64
	if !assert.Eventually(t, func() bool {
		_, a, _ = chain.share(later())
		_, b, _ = sorter.share(later())
		_, c, _ = napperShare(later())
		_, d, _ = handler.share(later())
		return a >= 300 && b >= 300 && d >= 300 && c >= int64(2*time.Second)
	}, testutil.Patient(180*time.Second), 500*time.Millisecond) {
		t.Fatalf("the OTLP endpoint received too few samples of the workload: chain %d, sorter %d, signal handler %d (want 300 each), napper %v off CPU (want 2s), in %d requests after the first %d",
			a, b, d, time.Duration(c), len(later()), skip)
	}

	chainShare, chainN, chainEx := chain.share(later())
	sortShare, sortN, sortEx := sorter.share(later())
	handlerShare, handlerN, handlerEx := handler.share(later())
	napShare, napNs, napEx := napperShare(later())
	matrixFigure(t, "own frames %.1f%% whole, through qsort %.1f%%, out of a signal handler %.1f%%, off-CPU %.1f%%",
		100*chainShare, 100*sortShare, 100*handlerShare, 100*napShare)
	t.Logf("chain: %d samples, sorter: %d, signal handler: %d, napper: %v off CPU (after %d requests)", chainN, sortN, handlerN, time.Duration(napNs), skip)
	assert.GreaterOrEqual(t, chainShare, 0.95, "e.g. %s", chainEx)
	assert.GreaterOrEqual(t, sortShare, 0.95, "e.g. %s", sortEx)
	assert.GreaterOrEqual(t, handlerShare, 0.95, "out of a signal handler, e.g. %s", handlerEx)
	assert.GreaterOrEqual(t, napShare, 0.95, "off-CPU, e.g. %s", napEx)
}
