//go:build linux

package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// busyRuntime is a long-running program of a busy node: it maps file (a
// large library or executable) and wakes every 20 ms to do a little work
// (about 1% of a core: tests of other packages run beside this one), so it
// is sampled and its tables load.
type busyRuntime struct {
	name string
	file string // mapped once it is up
	argv func(dir string) []string
}

// pacedPipe feeds a compressor a little data every 100 ms: it stays mapped
// and nearly idle.
const pacedPipe = `while :; do head -c 4096 /dev/urandom; sleep 0.1; done | %s > /dev/null`

const busyJava = `class Busy {
  public static void main(String[] a) throws Exception {
    long s = 0;
    while (true) { for (int i = 0; i < 50000; i++) s += i ^ s; Thread.sleep(20); }
  }
}`

const busyPython = "import time\nwhile True:\n    sum(range(5000)); time.sleep(0.02)\n"

func busyRuntimes() []busyRuntime {
	rts := []busyRuntime{
		{"node 20", "/usr/bin/node", func(string) []string {
			return []string{"/usr/bin/node", "-e", "setInterval(() => { let s = 0; for (let i = 0; i < 2e4; i++) s += i }, 20)"}
		}},
		{"xz", "/usr/bin/xz", func(string) []string { return []string{"sh", "-c", fmt.Sprintf(pacedPipe, "xz -9 -T1")} }},
		{"gzip", "/usr/bin/gzip", func(string) []string { return []string{"sh", "-c", fmt.Sprintf(pacedPipe, "gzip -9")} }},
		{"python3.11", "/usr/bin/python3.11", func(string) []string { return []string{"/usr/bin/python3.11", "-c", busyPython} }},
	}
	for _, jdk := range []string{testutil.OpenJDK17, testutil.Temurin25} {
		rts = append(rts, busyRuntime{filepath.Base(jdk), jdk + "/lib/server/libjvm.so", func(dir string) []string {
			return []string{jdk + "/bin/java", "-Xmx64m", filepath.Join(dir, "Busy.java")}
		}})
	}
	for _, v := range []string{"3.9", "3.10", "3.11", "3.12", "3.13"} {
		matches, _ := filepath.Glob("/root/.pyenv/versions/" + v + ".*/bin/python" + v)
		if len(matches) == 0 {
			matches = []string{"/root/.pyenv/versions/" + v + "/bin/python" + v} // missing: skipped below
		}
		py := matches[0]
		rts = append(rts, busyRuntime{"CPython " + v, py, func(string) []string { return []string{py, "-c", busyPython} }})
	}
	// A large C++ library, as a process embedding LLVM maps it.
	if llvm, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libLLVM-1*.so.1"); len(llvm) > 0 {
		lib := llvm[0]
		rts = append(rts, busyRuntime{"libLLVM", lib, func(string) []string {
			return []string{"/usr/bin/python3.11", "-c", fmt.Sprintf("import ctypes; ctypes.CDLL(%q)\n%s", lib, busyPython)}
		}})
	}
	return rts
}

// On a node running node, two JVMs, six CPythons, xz, gzip and libLLVM at
// once (tables of ~3M rows, three times what the fixed rows array of old
// held), every file gets its table within the default budget, and a
// program without frame pointers started last is walked whole.
func TestUnwindTablesFitABusyNode(t *testing.T) {
	testutil.RequireBPF(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Busy.java"), []byte(busyJava), 0o644))
	var started []string
	pids := map[string]int{}
	files := map[string]string{} // as the processes map them
	for _, rt := range busyRuntimes() {
		real, err := filepath.EvalSymlinks(rt.file)
		if err != nil {
			t.Logf("%s: not on this machine (%v)", rt.name, err)
			continue
		}
		files[rt.name] = real
		argv := rt.argv(dir)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		testutil.StartChild(t, cmd) // in a group of its own: a shell's pipeline goes with it
		pids[rt.name] = cmd.Process.Pid
		started = append(started, rt.name)
	}
	require.GreaterOrEqual(t, len(started), 10, "runtimes started: %v", started)
	// Up once each maps its file (the shells: once their compressor runs).
	var waiting []string
	mappers := map[string]int{} // the process mapping each runtime's file
	require.Eventually(t, func() bool {
		waiting = waiting[:0]
		for _, name := range started {
			if mappers[name] = mapperOf(pids[name], files[name]); mappers[name] == 0 {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0
	}, 60*time.Second, 100*time.Millisecond, "runtimes not up: %v", &waiting)

	tables := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 99, Unwind: tables})
	// Each runtime is sampled (about once a second at 1% of a core: later
	// on a loaded machine), announced and its tables loaded.
	began := time.Now()
	require.Eventually(t, func() bool {
		waiting = waiting[:0]
		for _, name := range started {
			if !tables.Loaded(uint32(mappers[name])) {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0
	}, 2*time.Minute, 50*time.Millisecond, "runtimes without tables: %v", &waiting)
	last := tables.Stats()
	t.Logf("tables of the runtimes loaded in %v (%v building them)", time.Since(began).Round(time.Millisecond), last.BuildTime.Round(time.Millisecond))
	cmd := testutil.StartWorkload(t, testutil.BuildC(t, "nofp.c"), "60")
	pid := uint32(cmd.Process.Pid)
	awaitTables(t, tables, pid)
	samples, st, _ := sampleFor(t, s, 4*time.Second)
	_ = s.Close()

	ts := tables.Stats()
	t.Logf("%d runtimes; tables %d, %d rows (%.1f MiB) of %d; failed %v; unwind ends %v; rescans %d, reloads %d",
		len(started), ts.Tables, ts.RowsUsed, float64(ts.RowsUsed*8)/(1<<20), ts.RowCapacity, ts.Failed, st.UnwindEnds, ts.Rescans, ts.Reloads)
	assert.Zero(t, ts.Failed[capture.TableSpaceFull], "space_full")
	assert.Zero(t, ts.Failed[capture.TableMapFailed], "map_failed")
	assert.Zero(t, ts.Failed[capture.TableTooLarge], "too_large")
	assert.Greater(t, ts.RowsUsed, uint64(1<<20), "more rows than the old array held")

	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	c := chain{[]string{"chain_leaf", "chain_c", "chain_b", "chain_a", "main"}, mainRoots}
	share, n, example := c.share(sym, pid, samples)
	t.Logf("started last: %.1f%% of %d chain_leaf samples whole", 100*share, n)
	require.GreaterOrEqual(t, n, uint64(50), "chain_leaf samples")
	assert.GreaterOrEqual(t, share, 0.95, "e.g. %s", strings.Join(example, " <- "))
}

// mapperOf returns pid, or the child of pid (a shell's pipeline), that maps
// path, or 0 when none does.
func mapperOf(pid int, path string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if strings.Contains(string(b), path) {
		return pid
	}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		b, _ := os.ReadFile("/proc/" + c + "/maps")
		if strings.Contains(string(b), path) {
			child, _ := strconv.Atoi(c)
			return child
		}
	}
	return 0
}
