//go:build linux

package offcpu

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// The "napper" thread of a program built without frame pointers blocks in
// glibc's nanosleep, 2 ms at a time, under nap_leaf <- nap_round <- napper.
// With unwind tables at least 95% of its off-CPU time has that chain whole,
// in order, down to the thread's root; with frame pointers alone it has
// not (what the tables fix). Both mechanisms walk: the switch-out program
// with tail calls, the task work with bpf_loop.
func TestUnwindTablesOffCPU(t *testing.T) { forEachMechanism(t, testUnwindTablesOffCPU) }

func testUnwindTablesOffCPU(t *testing.T, mech Mechanism) {
	testutil.RequireBPF(t)
	cmd := testutil.StartWorkload(t, testutil.BuildC(t, "nofp.c"), "60")
	pid := uint32(cmd.Process.Pid)
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	for _, withTables := range []bool{false, true} {
		opts := Options{MinBlock: time.Millisecond, Mechanism: mech, TargetPIDs: []uint32{pid}}
		if withTables {
			tables, err := unwinder.OpenTables(procfs.FS{Root: "/proc"}, 0)
			require.NoError(t, err)
			opts.Unwind = tables
			defer func() { require.NoError(t, tables.Close()) }()
		}
		tr := openTracer(t, opts)
		// The first waits announce the process; its tables load then.
		if withTables {
			require.Eventually(t, func() bool { return opts.Unwind.Loaded(pid) }, time.Minute, 20*time.Millisecond)
		} else {
			time.Sleep(time.Second)
		}
		_, _, err := tr.Drain()
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		samples, st, err := tr.Drain()
		require.NoError(t, err)
		require.NoError(t, tr.Close())

		whole, total, example := napperShare(sym, pid, samples)
		share := float64(whole) / float64(max(total, 1))
		t.Logf("tables %v: %.1f%% of %v off-CPU whole; unwind ends %v, %d frames",
			withTables, 100*share, time.Duration(total), st.UnwindEnds, st.UnwindFrames)
		if total < uint64(time.Second) {
			t.Fatalf("napper blocked %v in 3 s, want at least 1 s", time.Duration(total))
		}
		switch {
		case !withTables && share > 0.5:
			t.Errorf("frame pointers alone give whole stacks (%.2f): the fixture does not test the tables", share)
		case withTables && share < 0.95:
			t.Errorf("%.1f%% of the time whole, want >= 95%%; e.g. %s", 100*share, strings.Join(example, " <- "))
		}
		if withTables && st.UnwindEnds[capture.UnwindRoot] == 0 {
			t.Errorf("no walk reached a root: %v", st.UnwindEnds)
		}
		if !withTables && st.UnwindEnds.Total() != 0 {
			t.Errorf("walks without tables: %v", st.UnwindEnds)
		}
	}
}

// napperShare returns the napper thread's off-CPU time whose user stack is
// nanosleep <- nap_leaf <- nap_round <- napper <- the thread's root, its
// total, and an example stack that is not.
func napperShare(sym *symbolize.Symbolizer, pid uint32, samples []capture.RawStack) (whole, total uint64, example []string) {
	chain := []string{"nap_leaf", "nap_round", "napper", "start_thread"}
	for _, s := range samples {
		if s.PID != pid || s.Comm != "napper" {
			continue
		}
		var names []string
		for _, f := range sym.User(pid, s.Addresses(capture.UserFrame)) {
			names = append(names, f.Function)
		}
		total += s.Value
		at := slices.Index(names, chain[0])
		if at > 0 && strings.Contains(names[0], "nanosleep") && inOrder(names[at:], chain) {
			whole += s.Value
		} else if example == nil {
			example = names
		}
	}
	return whole, total, example
}

// inOrder says whether names holds want in order (other names may come between).
func inOrder(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && n == want[i] {
			i++
		}
	}
	return i == len(want)
}
