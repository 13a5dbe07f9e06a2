//go:build linux

package e2e

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
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// mixProgram is one program of the mix and how its samples are told: which
// are its working thread's, and which of those name its hot function.
type mixProgram struct {
	name   string
	cmd    *exec.Cmd
	thread func(st pdata.NamedStack, pid int) bool
	hot    func(st pdata.NamedStack) bool
}

// share is the share of p's working thread's samples in received that
// name its hot function, and their number.
func (p mixProgram) share(received []pprofile.Profiles) (float64, int64) {
	var all, hot int64
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), p.cmd.Process.Pid)) {
			if !p.thread(st, p.cmd.Process.Pid) {
				continue
			}
			all += st.Value
			if p.hot(st) {
				hot += st.Value
			}
		}
	}
	return ratio(hot, all), all
}

// byReport is p's share in each report of received that has its samples.
func (p mixProgram) byReport(received []pprofile.Profiles) string {
	var out []string
	for _, pd := range received {
		if share, n := p.share([]pprofile.Profiles{pd}); n > 0 {
			out = append(out, fmt.Sprintf("%.0f%%/%d", 100*share, n))
		}
	}
	return strings.Join(out, " ")
}

// example describes the most frequent stack of p's working thread that
// does not name its hot function.
func (p mixProgram) example(received []pprofile.Profiles) string {
	counts := map[string]int64{}
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), p.cmd.Process.Pid)) {
			if p.thread(st, p.cmd.Process.Pid) && !p.hot(st) {
				counts[describeFrames(st.Frames)] += st.Value
			}
		}
	}
	best, n := "", int64(0)
	for k, v := range counts {
		if v > n {
			best, n = k, v
		}
	}
	return fmt.Sprintf("%d samples: %s", n, best)
}

// names says whether a stack has a frame of runtime typ ("native" too)
// whose function is fn.
func names(typ, fn string) func(pdata.NamedStack) bool {
	return func(st pdata.NamedStack) bool {
		return slices.ContainsFunc(st.Frames, func(f pdata.NamedFrame) bool { return f.Type == typ && f.Function == fn })
	}
}

// mainThread is the process's first thread; javaThreads those a JVM's
// launcher starts, "java" as the kernel names them (its first thread only
// waits), GC and compiler threads left out.
func mainThread(st pdata.NamedStack, pid int) bool { return st.Attributes["thread.id"] == int64(pid) }
func javaThreads(st pdata.NamedStack, pid int) bool {
	return st.Attributes["thread.name"] == "java" && st.Attributes["thread.id"] != int64(pid)
}

// A node as a deploy leaves it: seven CPU-bound programs of five runtimes
// started at the same instant on the 2-CPU machine under a host-wide
// collector (xz compressing node's 100 MB binary, CPython 3.11, 3.12 and
// 3.13, OpenJDK 17, node twice, one with --perf-basic-prof). Over their first 15 s each names its hot
// function in at least 90% of its working thread's samples, over 40 s in
// at least 97%: what a process loses before its tables and walker entry
// are loaded.
func TestCollectorNamesAMixFromTheStart(t *testing.T) {
	bin := collectorBinary(t)
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(`    report_interval: 1s
    cpu: {samples_per_second: 99}
`, addr))
	waitReady(t, out)

	node := testutil.Node(t, 22)
	script := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "nodechain.js")
	pywork := testutil.Workload(t, "pywork.py")
	pythons := map[string]string{}
	for _, in := range testutil.Interpreters(t) {
		pythons[in.Name] = in.Path
	}
	classes := t.TempDir()
	jdk := testutil.JDKs(t)[0]
	b, err := testutil.RunWithin(exec.Command(filepath.Join(jdk, "bin", "javac"), "-d", classes,
		filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaInline.java")), testutil.Patient(2*time.Minute))
	require.NoError(t, err, "%s", b)

	const seconds = "60"
	type spec struct {
		name   string
		argv   []string
		thread func(pdata.NamedStack, int) bool
		hot    func(pdata.NamedStack) bool
	}
	specs := []spec{
		{"xz", []string{"xz", "-9", "-T1", "-c", node}, mainThread, func(st pdata.NamedStack) bool {
			return slices.ContainsFunc(st.Functions, func(f string) bool { return len(f) > 5 && f[:5] == "lzma_" })
		}},
		{"node", []string{node, script, seconds}, mainThread, names("v8js", "spin")},
		{"node --perf-basic-prof", []string{node, "--perf-basic-prof", script, seconds}, mainThread, names("v8js", "spin")},
		{"OpenJDK 17", append(append([]string{filepath.Join(jdk, "bin", "java")}, javaInlineFlags...), "-cp", classes, "JavaInline", seconds),
			javaThreads, names("jvm", "JavaInline.burn")},
	}
	for _, v := range []string{"debian-3.11", "3.12.1", "3.13.0"} {
		if path, ok := pythons[v]; ok {
			specs = append(specs, spec{"CPython " + v, []string{path, pywork, "fib", seconds}, mainThread, names("cpython", "fib")})
		} else {
			testutil.SkipOrFail(t, "no CPython %s here", v)
		}
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { devNull.Close() })
	programs := make([]mixProgram, len(specs))
	work := t.TempDir() // node --perf-basic-prof writes its isolate log here
	begin := time.Now()
	for i, s := range specs {
		cmd := exec.Command(s.argv[0], s.argv[1:]...)
		cmd.Dir = work
		cmd.Stdout = devNull // xz's output
		testutil.StartChild(t, cmd)
		programs[i] = mixProgram{s.name, cmd, s.thread, s.hot}
	}
	// The reports of the first 15 s, and of 40 s (a report more: its
	// samples were taken before).
	upTo := func(d time.Duration) []pprofile.Profiles {
		time.Sleep(time.Until(begin.Add(d + 1500*time.Millisecond)))
		return otlp.all()
	}
	first, whole := upTo(15*time.Second), upTo(40*time.Second)
	for _, p := range programs {
		s15, n15 := p.share(first)
		s40, n40 := p.share(whole)
		t.Logf("%s (pid %d): %.1f%% of %d samples over 15 s, %.1f%% of %d over 40 s", p.name, p.cmd.Process.Pid, 100*s15, n15, 100*s40, n40)
		if s15 < 0.90 || s40 < 0.97 {
			t.Logf("%s: by report: %s; e.g. %s", p.name, p.byReport(whole), p.example(whole))
		}
		assert.GreaterOrEqual(t, n15, int64(100), "%s: samples over 15 s", p.name)
		assert.GreaterOrEqual(t, s15, 0.90, "%s over 15 s", p.name)
		assert.GreaterOrEqual(t, s40, 0.97, "%s over 40 s", p.name)
	}
}
