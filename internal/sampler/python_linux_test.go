//go:build linux

package sampler

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// pidIdentity identifies a process by its pid alone.
type pidIdentity struct{}

func (pidIdentity) Resolve(pid uint32) (report.Identity, error) {
	return report.Identity{PID: pid}, nil
}

// pyFrame is a Python frame a stack must hold: its function and line
// (0: any line).
type pyFrame struct {
	function string
	line     int
}

// pyChain is the Python frames a stack must hold, leaf first: leaf, then
// any number of repeat (recursion), then rest, then (with callers) any
// frames.
type pyChain struct {
	leaf, repeat pyFrame
	rest         []pyFrame
	callers      bool
}

// pythonShare returns, of the samples of thread tid, the share (by value)
// whose Python frames are chain's, with a native frame below the last (in
// the native stack, not above its root), their total, and an example of
// one that is not.
func pythonShare(samples []report.Sample, tid uint32, chain pyChain) (share float64, total int64, example string) {
	var whole int64
	for _, s := range samples {
		if s.TID != tid {
			continue
		}
		total += s.Value
		if chain.holds(s.Frames) {
			whole += s.Value
		} else if example == "" {
			example = describe(s.Frames)
		}
	}
	if total == 0 {
		return 0, 0, ""
	}
	return float64(whole) / float64(total), total, example
}

func (c pyChain) holds(frames []report.Frame) bool {
	var py []report.Frame
	last := -1
	for i, f := range frames {
		if f.Type == report.FramePython {
			py = append(py, f)
			last = i
		}
	}
	if len(py) == 0 || last == len(frames)-1 || frames[last+1].Type != report.FrameNative {
		return false
	}
	match := func(f report.Frame, w pyFrame) bool {
		return f.Function == w.function && (w.line == 0 || int(f.Line) == w.line)
	}
	if !match(py[0], c.leaf) {
		return false
	}
	py = py[1:]
	for len(py) > len(c.rest) && match(py[0], c.repeat) {
		py = py[1:]
	}
	if len(py) < len(c.rest) || len(py) > len(c.rest) && !c.callers {
		return false
	}
	for i, w := range c.rest {
		if !match(py[i], w) {
			return false
		}
	}
	return true
}

func describe(frames []report.Frame) string {
	var b strings.Builder
	for i, f := range frames {
		if i > 0 {
			b.WriteString(" <- ")
		}
		b.WriteString(f.Function)
		if f.Type == report.FramePython {
			fmt.Fprintf(&b, ":%d", f.Line)
		}
	}
	return b.String()
}

// samplePython samples pid for 3 s with unwind tables and returns its
// assembled samples and the drain's stats. window, when set, is called as
// the 3 s begin and as they end.
func samplePython(t *testing.T, pid uint32, sym *symbolize.Symbolizer, window ...func()) ([]report.Sample, capture.Stats) {
	t.Helper()
	ut := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: ut})
	awaitTables(t, ut, pid)
	if _, _, err := s.Drain(); err != nil { // start from an empty window
		t.Fatal(err)
	}
	for _, f := range window[:min(len(window), 1)] {
		f()
	}
	time.Sleep(3 * time.Second)
	raw, st, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range window[min(len(window), 1):] {
		f()
	}
	_ = s.Close()
	a := assemble.Assembler{Symbols: sym, Identities: pidIdentity{}}
	prof, _ := a.Assemble(report.KindCPU, time.Now(), time.Now(), 1, raw)
	for _, p := range prof.Processes {
		if p.Identity.PID == pid {
			return p.Samples, st
		}
	}
	t.Fatalf("no samples of pid %d", pid)
	return nil, st
}

// CPython 3.7 to 3.15 (testutil.Interpreters: pyenv's builds, Debian's
// static 3.11, Debian sid's 3.14 and 3.15, 3.13 and 3.14 built free-threaded, 3.14
// with a PyThreadState field added), run
// without any flag, sampled with unwind tables:
//   - fib: at least 95% of the main thread's samples show fib (recursing at
//     its line) <- work <- main <- <module>, each at the line it runs, in
//     place of the interpreter's native eval frames;
//   - pool: the same with 200 idle threads started before (the main thread
//     is the last of the interpreter's thread list);
//   - split: two threads taking turns burning CPU 3:1 in two methods come
//     out as the threads' CPU time split (75% +- 5 points);
//   - threads: four threads running fib at once (in parallel without the
//     GIL) each show fib <- work <- worker <- threading's frames in 95%;
//   - zlib: zlib's native frames sit under the Python function that called
//     zlib.compress in at least 95% of its samples;
//   - asyncio: a task recursing in fib shows its coroutines compute <-
//     serve over the event loop in 95%.
func TestPythonFrames(t *testing.T) {
	testutil.RequireBPF(t)
	lines := testutil.PythonLines(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Name, func(t *testing.T) {
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			t.Run("fib", func(t *testing.T) { testPythonFib(t, in, sym, lines, "fib") })
			t.Run("pool", func(t *testing.T) { testPythonFib(t, in, sym, lines, "pool") })
			t.Run("split", func(t *testing.T) { testPythonSplit(t, in, sym) })
			t.Run("threads", func(t *testing.T) { testPythonThreads(t, in, sym, lines) })
			t.Run("zlib", func(t *testing.T) { testPythonZlib(t, in, sym, lines) })
			t.Run("asyncio", func(t *testing.T) { testPythonAsyncio(t, in, sym, lines) })
		})
	}
}

func testPythonFib(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer, lines map[string]int, mode string) {
	testPythonMain(t, in, sym, mode, pyChain{
		leaf:   pyFrame{"fib", 0},
		repeat: pyFrame{"fib", lines["fib_recurse"]},
		rest:   []pyFrame{{"work", lines["work_call"]}, {"main", lines["module_call"]}, {"<module>", lines["module_main"]}},
	})
}

// testPythonAsyncio: a task of an event loop recursing in fib shows its
// coroutines, compute <- serve at their lines, over the loop's frames.
func testPythonAsyncio(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer, lines map[string]int) {
	testPythonMain(t, in, sym, "asyncio", pyChain{
		leaf:    pyFrame{"fib", 0},
		repeat:  pyFrame{"fib", lines["fib_recurse"]},
		rest:    []pyFrame{{"compute", lines["compute_call"]}, {"serve", lines["serve_await"]}},
		callers: true, // the event loop's
	})
}

// testPythonMain runs pywork.py in mode: at least 95% of its main thread's
// samples hold chain.
func testPythonMain(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer, mode string, chain pyChain) {
	cmd := testutil.StartPython(t, in, mode, "30")
	pid := uint32(cmd.Process.Pid)
	samples, st := samplePython(t, pid, sym)
	share, total, example := pythonShare(samples, pid, chain)
	t.Logf("%.1f%% of %d samples whole; python walks %v, %d frames; unsymbolized %v",
		100*share, total, st.PythonEnds, st.PythonFrames, sym.Stats().RuntimeUnsymbolized)
	if total < 150 {
		t.Fatalf("%d samples of the main thread, want 150", total)
	}
	if share < 0.95 {
		t.Errorf("%.1f%% of samples whole, want >= 95%%; e.g. %s", 100*share, example)
	}
}

// testPythonThreads: four threads run fib at once; each one's samples show
// fib <- work <- worker <- threading's frames at their lines.
func testPythonThreads(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer, lines map[string]int) {
	cmd := testutil.StartPython(t, in, "threads", "30")
	pid := uint32(cmd.Process.Pid)
	samples, st := samplePython(t, pid, sym)
	thread := func(name string) pyFrame { // a method of threading.Thread, any line
		if in.Minor() >= 11 {
			name = "Thread." + name
		}
		return pyFrame{name, 0}
	}
	chain := pyChain{
		leaf:   pyFrame{"fib", 0},
		repeat: pyFrame{"fib", lines["fib_recurse"]},
		rest: []pyFrame{{"work", lines["work_call"]}, {"worker", lines["worker_call"]},
			thread("run"), thread("_bootstrap_inner"), thread("_bootstrap")},
	}
	tids := map[uint32]bool{}
	for _, s := range samples {
		if s.TID != pid {
			tids[s.TID] = true
		}
	}
	if len(tids) != 4 {
		t.Fatalf("samples of threads %v besides the main thread, want 4", tids)
	}
	for tid := range tids {
		share, total, example := pythonShare(samples, tid, chain)
		t.Logf("thread %d: %.1f%% of %d samples whole; python walks %v, %d frames", tid, 100*share, total, st.PythonEnds, st.PythonFrames)
		if total < 50 { // the GIL shares one CPU's ~600 samples unevenly
			t.Errorf("thread %d: %d samples, want 50", tid, total)
		}
		if share < 0.95 {
			t.Errorf("thread %d: %.1f%% of samples whole, want >= 95%%; e.g. %s", tid, 100*share, example)
		}
	}
}

func testPythonSplit(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer) {
	cmd := testutil.StartPython(t, in, "split", "30")
	pid := int(cmd.Process.Pid)
	// The threads' CPU time over the sampled window itself: they take
	// turns, so a longer window (with the tables' loading) skews the truth.
	var cpu0, cpu1 map[uint32]time.Duration
	samples, _ := samplePython(t, uint32(pid), sym, func() { cpu0 = threadCPU(t, pid) }, func() { cpu1 = threadCPU(t, pid) })
	// 3.11+ names methods by their qualified name.
	qualified := in.Minor() >= 11
	var byMethod [2]int64
	tids := [2]map[uint32]bool{{}, {}}
	for _, s := range samples {
		for _, f := range s.Frames {
			name := f.Function
			if !qualified {
				name = "Burner." + name
			}
			if i := map[string]int{"Burner.hot_loop": 0, "Burner.cold_loop": 1}[name]; name == "Burner.hot_loop" || name == "Burner.cold_loop" {
				byMethod[i] += s.Value
				tids[i][s.TID] = true
				break
			}
		}
	}
	var truth [2]time.Duration
	for i := range tids {
		for tid := range tids[i] {
			truth[i] += cpu1[tid] - cpu0[tid]
		}
	}
	share := float64(byMethod[0]) / float64(byMethod[0]+byMethod[1])
	want := float64(truth[0]) / float64(truth[0]+truth[1])
	t.Logf("hot_loop %.1f%% of %d samples; the threads' CPU time: %.1f%% (%v : %v)",
		100*share, byMethod[0]+byMethod[1], 100*want, truth[0], truth[1])
	if byMethod[0]+byMethod[1] < 150 || len(tids[0]) != 1 || len(tids[1]) != 1 {
		t.Fatalf("%v samples in hot_loop and cold_loop from threads %v, want 150 from one thread each", byMethod, tids)
	}
	if math.Abs(want-0.75) > 0.05 {
		t.Fatalf("the workload split its CPU %.1f%%, not 3:1", 100*want)
	}
	if math.Abs(share-want) > 0.05 {
		t.Errorf("hot_loop has %.1f%% of the samples, its thread %.1f%% of the CPU time", 100*share, 100*want)
	}
}

func testPythonZlib(t *testing.T, in testutil.Interpreter, sym *symbolize.Symbolizer, lines map[string]int) {
	cmd := testutil.StartPython(t, in, "zlib", "30")
	pid := uint32(cmd.Process.Pid)
	samples, _ := samplePython(t, pid, sym)
	var inZlib, under, total int64
	example := ""
	for _, s := range samples {
		if s.TID != pid || len(s.Frames) == 0 {
			continue
		}
		total += s.Value
		if m := s.Frames[0].Mapping; m == nil || !strings.Contains(m.File, "libz.so") {
			continue
		}
		inZlib += s.Value
		for _, f := range s.Frames {
			if f.Type != report.FramePython {
				continue
			}
			if f.Function == "compress_block" && int(f.Line) == lines["zlib_call"] {
				under += s.Value
			} else if example == "" {
				example = describe(s.Frames)
			}
			break
		}
	}
	share := float64(under) / float64(max(inZlib, 1))
	t.Logf("%d of %d samples in libz, %.1f%% of them under compress_block", inZlib, total, 100*share)
	if total < 150 || inZlib < total/2 {
		t.Fatalf("%d samples in libz of %d, want at least half of 150", inZlib, total)
	}
	if share < 0.95 {
		t.Errorf("%.1f%% of libz samples under compress_block, want >= 95%%; e.g. %s", 100*share, example)
	}
}

// threadCPU returns the on-CPU time of each thread of pid so far.
func threadCPU(t *testing.T, pid int) map[uint32]time.Duration {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	require.NoError(t, err)
	out := map[uint32]time.Duration{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		tid, _ := strconv.ParseUint(filepath.Base(filepath.Dir(f)), 10, 32)
		ns, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		out[uint32(tid)] = time.Duration(ns)
	}
	return out
}
