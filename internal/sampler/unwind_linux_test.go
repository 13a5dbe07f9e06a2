//go:build linux

package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// chain is a call chain a fixture runs: samples whose leaf frame is
// callers[0] must hold the rest of callers in order (other frames may come
// between) and reach one of roots.
type chain struct {
	callers []string
	roots   []string
}

var (
	mainRoots   = []string{"__libc_start_main", "__libc_start_call_main", "_start"}
	threadRoots = []string{"start_thread", "__clone3", "clone3", "__clone", "clone"}
	goRoots     = []string{"runtime.goexit", "runtime.main"}
)

// matches says whether a symbolized name is want: equal, a Rust path
// ending in it, a C++ function with its parameters, or glibc's own name of
// qsort (__qsort_r in 2.36).
func matches(name, want string) bool {
	return name == want || strings.HasSuffix(name, "::"+want) || strings.HasPrefix(name, want+"(") ||
		want == "qsort" && strings.Contains(name, "qsort")
}

// share returns, of the samples whose leaf is the chain's, the share (by
// value) that are whole, their number and an example of one that is not.
func (c chain) share(sym *symbolize.Symbolizer, pid uint32, samples []capture.RawStack) (share float64, total uint64, example []string) {
	var whole uint64
	for _, smp := range samples {
		if smp.PID != pid {
			continue
		}
		var names []string
		for _, f := range sym.User(pid, smp.Addresses(capture.UserFrame)) {
			names = append(names, f.Function)
		}
		if len(names) == 0 || !matches(names[0], c.callers[0]) {
			continue
		}
		total += smp.Value
		if c.whole(names) {
			whole += smp.Value
		} else if example == nil {
			example = names
		}
	}
	if total == 0 {
		return 0, 0, nil
	}
	return float64(whole) / float64(total), total, example
}

func (c chain) whole(names []string) bool {
	i := 1
	for _, n := range names[1:] {
		if i < len(c.callers) && matches(n, c.callers[i]) {
			i++
		}
	}
	return i == len(c.callers) && slices.ContainsFunc(names, func(n string) bool { return slices.Contains(c.roots, n) })
}

// openTables opens unwind tables for the test, or returns nil (frame
// pointers only) when with is false.
func openTables(t *testing.T, with bool) *unwinder.Tables {
	t.Helper()
	if !with {
		return nil
	}
	testutil.RequireBPF(t)
	tables, err := unwinder.OpenTables(procfs.FS{Root: "/proc"}, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tables.Close()) })
	return tables
}

// awaitTables returns once pid's tables are loaded (the first samples
// announce the process; its tables load then), or after a second when
// there are none. A busy machine (-race, other packages' tests) can take
// seconds: what is measured after it is the walk, not the wait.
func awaitTables(t *testing.T, tables *unwinder.Tables, pid uint32) {
	t.Helper()
	if tables == nil {
		time.Sleep(time.Second)
		return
	}
	began := time.Now()
	require.Eventually(t, func() bool { return tables.Loaded(pid) }, time.Minute, 20*time.Millisecond, "tables of pid %d", pid)
	t.Logf("tables of pid %d loaded %v after sampling began", pid, time.Since(began).Round(time.Millisecond))
}

// Programs built without frame pointers (C, C++ with exceptions, a Rust
// release build), and a Go binary: with unwind tables, at least 95% of the
// samples of each known chain are whole, through the programs' own frames
// and glibc's, down to the thread's root. Without tables, the C fixture's
// are not (what the tables fix).
func TestUnwindTablesWalkCodeWithoutFramePointers(t *testing.T) {
	testutil.RequireBPF(t)
	for _, tt := range []struct {
		name   string
		build  func(t *testing.T) string
		chains []chain
		// fpBreaks: frame pointers alone lose these chains' callers.
		fpBreaks bool
	}{
		{"C", func(t *testing.T) string { return testutil.BuildC(t, "nofp.c") }, []chain{
			{[]string{"chain_leaf", "chain_c", "chain_b", "chain_a", "main"}, mainRoots},
			{[]string{"compare_slow", "qsort", "sort_round", "sorter"}, threadRoots},
		}, true},
		{"C++", func(t *testing.T) string { return testutil.BuildC(t, "nofp_cpp.cpp") }, []chain{
			{[]string{"cpp_leaf", "cpp_b", "cpp_a", "main"}, mainRoots},
		}, false},
		{"Rust", func(t *testing.T) string { return testutil.BuildRust(t, "nofp_rust.rs") }, []chain{
			{[]string{"rust_leaf", "rust_b", "rust_a", "main"}, mainRoots},
		}, false},
		{"Go", func(t *testing.T) string { return testutil.BuildGo(t, "gohot") }, []chain{
			{[]string{"main.(*Cruncher).hotLoop", "main.main"}, goRoots},
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := testutil.StartWorkload(t, tt.build(t), "60")
			pid := uint32(cmd.Process.Pid)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			modes := []bool{true}
			if tt.fpBreaks {
				modes = []bool{false, true}
			}
			for _, tables := range modes {
				ut := openTables(t, tables)
				s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: ut})
				awaitTables(t, ut, pid)
				samples, st, _ := sampleFor(t, s, 3*time.Second)
				_ = s.Close()
				for _, c := range tt.chains {
					share, n, example := c.share(sym, pid, samples)
					t.Logf("tables %v: %s: %.1f%% of %d samples whole; unwind ends %v, %d frames",
						tables, c.callers[0], 100*share, n, st.UnwindEnds, st.UnwindFrames)
					if n < 100 {
						t.Fatalf("%d samples with leaf %s, want 100", n, c.callers[0])
					}
					switch {
					case !tables && share > 0.5:
						t.Errorf("frame pointers alone give whole stacks (%.2f): the fixture does not test the tables", share)
					case tables && share < 0.95:
						t.Errorf("%.1f%% of samples whole, want >= 95%%; e.g. %s", 100*share, strings.Join(example, " <- "))
					}
				}
				if tables && st.UnwindEnds[capture.UnwindRoot] == 0 {
					t.Errorf("no walk reached a root: %v", st.UnwindEnds)
				}
			}
		})
	}
}

// Debian's own stripped binaries, built without frame pointers, compressing
// a stream: with unwind tables, at least 90% of their samples reach
// __libc_start_main (the deepest frame the symbolizer names in them).
func TestUnwindTablesDebianBinaries(t *testing.T) {
	testutil.RequireBPF(t)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"xz", []string{"-9", "-T1", "-c"}},
		{"gzip", []string{"-9", "-c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin, err := exec.LookPath(tt.name)
			if err != nil {
				testutil.SkipOrFail(t, "%s is not installed: %v", tt.name, err)
			}
			pid := compressForever(t, bin, tt.args...)
			ut := openTables(t, true)
			s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: ut})
			awaitTables(t, ut, pid)
			samples, st, _ := sampleFor(t, s, 3*time.Second)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var total, rooted, depth uint64
			var example []string
			for _, smp := range samples {
				if smp.PID != pid {
					continue
				}
				total += smp.Value
				addrs := smp.Addresses(capture.UserFrame)
				depth += smp.Value * uint64(len(addrs))
				var names []string
				for _, f := range sym.User(pid, addrs) {
					names = append(names, f.Function)
				}
				if slices.Contains(names, "__libc_start_main") || slices.Contains(names, "__libc_start_call_main") {
					rooted += smp.Value
				} else if example == nil {
					example = names
				}
			}
			if total < 100 {
				t.Fatalf("%d samples of %s, want 100", total, tt.name)
			}
			share := float64(rooted) / float64(total)
			t.Logf("%s: %.1f%% of %d samples reach __libc_start_main, mean depth %.1f frames; unwind ends %v",
				tt.name, 100*share, total, float64(depth)/float64(total), st.UnwindEnds)
			if share < 0.9 {
				t.Errorf("%.1f%% of samples reach __libc_start_main, want >= 90%%; e.g. %s", 100*share, strings.Join(example, " <- "))
			}
		})
	}
}

// compressForever runs bin args, reading a pseudo-random but compressible
// stream and writing to nowhere, until the test ends; it returns its pid.
func compressForever(t *testing.T, bin string, args ...string) uint32 {
	t.Helper()
	cmd := exec.Command(bin, args...)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devnull.Close() })
	cmd.Stdout = devnull // the compressed stream
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	child := testutil.StartChild(t, cmd)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // before the Child's kill
	go func() {
		defer in.Close()
		buf := make([]byte, 1<<16)
		seed := uint64(1)
		for {
			for i := range buf {
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				buf[i] = "abcdefgh"[seed%8] // compressible, never the same
			}
			select {
			case <-done:
				return
			default:
			}
			if _, err := in.Write(buf); err != nil {
				return
			}
		}
	}()
	return uint32(child.Pid())
}

// A non-PIE build, a stripped build (whose own functions have no names:
// its samples must still reach the thread's root), and a process that
// execs the fixture after running a shell loop (the tables of its new
// program are loaded at the exec's announcement).
func TestUnwindTablesBuildsAndExec(t *testing.T) {
	testutil.RequireBPF(t)
	pie := testutil.BuildC(t, "nofp.c")
	stripped := filepath.Join(t.TempDir(), "nofp-stripped")
	out, err := testutil.RunWithin(exec.Command("strip", "-o", stripped, pie), testutil.Patient(time.Minute))
	require.NoError(t, err, "%s", out)
	shell := func(bin string) []string {
		return []string{"/bin/sh", "-c", "i=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done; exec " + bin + " 60"}
	}
	leaf := chain{[]string{"chain_leaf", "chain_c", "chain_b", "chain_a", "main"}, mainRoots}
	for _, tt := range []struct {
		name     string
		argv     []string
		named    bool          // the fixture's functions have names
		warmup   time.Duration // before the window measured
		settleOn string        // wait until the process runs this file
	}{
		{"non-PIE", []string{testutil.BuildC(t, "nofp.c", "-no-pie"), "60"}, true, time.Second, ""},
		{"stripped", []string{stripped, "60"}, false, time.Second, ""},
		{"exec", shell(pie), true, time.Second, pie},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := testutil.StartWorkload(t, tt.argv[0], tt.argv[1:]...)
			pid := uint32(cmd.Process.Pid)
			s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: openTables(t, true)})
			if tt.settleOn != "" {
				opened := time.Now()
				require.Eventually(t, func() bool {
					exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
					return exe == tt.settleOn
				}, 30*time.Second, 10*time.Millisecond, "the shell did not exec %s", tt.settleOn)
				// The shell ran (and was announced) under the sampler first.
				require.Greater(t, time.Since(opened), 500*time.Millisecond, "the shell's loop ended too soon to test the exec")
			}
			time.Sleep(tt.warmup)
			samples, st, _ := sampleFor(t, s, 3*time.Second)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			if tt.named {
				share, n, example := leaf.share(sym, pid, samples)
				t.Logf("%s: %.1f%% of %d chain_leaf samples whole; unwind ends %v", tt.name, 100*share, n, st.UnwindEnds)
				if n < 100 || share < 0.95 {
					t.Errorf("%.1f%% of %d samples whole, want >= 95%% of at least 100; e.g. %s", 100*share, n, strings.Join(example, " <- "))
				}
				return
			}
			var total, rooted uint64
			for _, smp := range samples {
				if smp.PID != pid {
					continue
				}
				total += smp.Value
				for _, f := range sym.User(pid, smp.Addresses(capture.UserFrame)) {
					if slices.Contains(mainRoots, f.Function) || slices.Contains(threadRoots, f.Function) {
						rooted += smp.Value
						break
					}
				}
			}
			share := float64(rooted) / float64(max(total, 1))
			t.Logf("%s: %.1f%% of %d samples reach a thread's root; unwind ends %v", tt.name, 100*share, total, st.UnwindEnds)
			if total < 100 || share < 0.95 {
				t.Errorf("%.1f%% of %d samples reach a root, want >= 95%% of at least 100", 100*share, total)
			}
		})
	}
}

// Our walk of the C fixture is at least as deep as what
// `perf record --call-graph dwarf` (which copies the stack and unwinds it
// afterwards with the same CFI) finds for the same process.
func TestUnwindDepthAgainstPerfDwarf(t *testing.T) {
	testutil.RequireBPF(t)
	perf, err := exec.LookPath("perf")
	if err != nil {
		testutil.SkipOrFail(t, "no perf: %v", err)
	}
	cmd := testutil.StartWorkload(t, testutil.BuildC(t, "nofp.c"), "60")
	pid := uint32(cmd.Process.Pid)

	ut := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 99, TargetPIDs: []uint32{pid}, Unwind: ut})
	awaitTables(t, ut, pid)
	samples, _, _ := sampleFor(t, s, 3*time.Second)
	_ = s.Close()
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	var ours, oursN float64
	for _, smp := range samples {
		addrs := smp.Addresses(capture.UserFrame)
		if smp.PID != pid || len(addrs) == 0 {
			continue
		}
		if f := sym.User(pid, addrs[:1]); len(f) == 0 || f[0].Function != "chain_leaf" {
			continue
		}
		ours += float64(smp.Value) * float64(len(addrs))
		oursN += float64(smp.Value)
	}

	data := filepath.Join(t.TempDir(), "perf.data")
	out, err := testutil.RunWithin(exec.Command(perf, "record", "-q", "-F", "99", "--call-graph", "dwarf", "-p", fmt.Sprint(pid), "-o", data, "--", "sleep", "3"),
		testutil.Patient(3*time.Second+time.Minute))
	require.NoError(t, err, "perf record: %s", out)
	script, err := testutil.OutputWithin(exec.Command(perf, "script", "-i", data, "-F", "comm,tid,ip,sym"), testutil.Patient(time.Minute))
	require.NoError(t, err, "perf script")
	var theirs, theirsN float64
	for _, block := range strings.Split(string(script), "\n\n") {
		var frames []string
		for _, line := range strings.Split(block, "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 2 {
				frames = append(frames, f[1])
			}
		}
		if len(frames) > 0 && frames[0] == "chain_leaf" {
			theirs += float64(len(frames))
			theirsN++
		}
	}
	require.Positive(t, oursN, "our samples of chain_leaf")
	require.Positive(t, theirsN, "perf's samples of chain_leaf")
	t.Logf("mean depth of chain_leaf samples: ours %.2f (%v samples), perf --call-graph dwarf %.2f (%v samples)",
		ours/oursN, oursN, theirs/theirsN, theirsN)
	assert.GreaterOrEqual(t, ours/oursN, theirs/theirsN-0.5, "our stacks are shallower than perf's")
}
