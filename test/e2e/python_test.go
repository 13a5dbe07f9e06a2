//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// pythonChain is the share of the samples of process pid (by process.pid)
// whose CPython frames are fib (any line, recursing at fibLine) <- work <-
// main <- <module> at the lines in want, with profile.frame.type cpython,
// the file pywork.py, and a native frame below them; their number and an
// example of one that is not.
func pythonChain(received []pprofile.Profiles, pid int, fibLine int64, want []pdata.NamedFrame) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), pid)) {
			all += st.Value
			if pythonWhole(st.Frames, fibLine, want) {
				whole += st.Value
			} else if example == "" {
				example = describeFrames(st.Frames)
			}
		}
	}
	return ratio(whole, all), all, example
}

func pythonWhole(frames []pdata.NamedFrame, fibLine int64, want []pdata.NamedFrame) bool {
	var py []pdata.NamedFrame
	last := -1
	for i, f := range frames {
		if f.Type != "cpython" {
			continue
		}
		if filepath.Base(f.File) != "pywork.py" {
			return false
		}
		py = append(py, f)
		last = i
	}
	if len(py) == 0 || last == len(frames)-1 || frames[last+1].Type != "native" || py[0].Function != "fib" {
		return false
	}
	py = py[1:]
	for len(py) > len(want) && py[0].Function == "fib" && py[0].Line == fibLine {
		py = py[1:]
	}
	if len(py) != len(want) {
		return false
	}
	for i, w := range want {
		if py[i].Function != w.Function || py[i].Line != w.Line {
			return false
		}
	}
	return true
}

// pyworkChain are pywork.py's frames above fib in its fib mode, at the
// lines of lines (testutil.PythonLines).
func pyworkChain(lines map[string]int) []pdata.NamedFrame {
	return []pdata.NamedFrame{
		{Function: "work", Line: int64(lines["work_call"])},
		{Function: "main", Line: int64(lines["module_call"])},
		{Function: "<module>", Line: int64(lines["module_main"])},
	}
}

func describeFrames(frames []pdata.NamedFrame) string {
	var b strings.Builder
	for i, f := range frames {
		if i > 0 {
			b.WriteString(" <- ")
		}
		b.WriteString(f.Function)
		if f.Function == "" {
			fmt.Fprintf(&b, "?%s@%#x", f.Mapping, f.Address)
		}
		switch f.Type {
		case "cpython", "ruby", "php":
			fmt.Fprintf(&b, ":%d", f.Line)
		}
	}
	return b.String()
}

// CPython processes started after the collector, one of them in a child
// pid namespace, with no flag: their CPU profiles through OTLP have the
// Python frames fib <- work <- main <- <module> with file and line (frame
// type cpython) in place of the interpreter's eval frames in at least 95%
// of their samples; the pprof files name the same functions, files and
// lines.
func TestCollectorPythonFrames(t *testing.T) {
	bin := collectorBinary(t)
	interpreters := testutil.Interpreters(t)
	if len(interpreters) == 0 {
		t.Fatal("no CPython interpreter")
	}
	lines := testutil.PythonLines(t)
	otlp, addr := startOTLPServer(t)
	dir := t.TempDir()
	metricsPort := freePort(t)
	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    targets: {executables: ['python']}
    cpu: {samples_per_second: 99}
    pprof: {directory: %s}
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc]}
`, dir, addr, metricsPort))
	waitReady(t, out)
	t.Cleanup(func() {
		if t.Failed() { // how the walks of the CPython frames ended
			text := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, "python") && !strings.HasPrefix(line, "#") {
					t.Log(line)
				}
			}
		}
	})

	// The newest interpreter (Debian sid's) on its own, Debian 12's static
	// one in a child pid namespace (with one interpreter, it runs both),
	// and a free-threaded build where there is one (not in the kernel
	// matrix's guests).
	direct, nested := interpreterNamed(interpreters, "sid-"), interpreterNamed(interpreters, "debian-")
	p1 := testutil.StartPython(t, direct, "fib", "60")
	type walked struct {
		name string
		pid  int
	}
	processes := []walked{{direct.Name, p1.Process.Pid}}
	freeThreaded, hasFreeThreaded := interpreterWithPrefix(interpreters, "free-threaded-")
	if hasFreeThreaded {
		p := testutil.StartPython(t, freeThreaded, "fib", "60")
		processes = append(processes, walked{freeThreaded.Name, p.Process.Pid})
	}
	unshare := testutil.StartChild(t, exec.Command("unshare", "--pid", "--fork", nested.Path, testutil.Workload(t, "pywork.py"), "fib", "60"))
	p2 := childOf(t, unshare.Pid())
	processes = append(processes, walked{nested.Name + " in a pid namespace", p2})
	// Killing unshare leaves its child running (the guests' busybox unshare
	// has no --kill-child): it would burn a CPU under the next tests.
	t.Cleanup(func() { _ = syscall.Kill(p2, syscall.SIGKILL) })

	want := pyworkChain(lines)
	fibLine := int64(lines["fib_recurse"])
	// The first samples of a process come before its tables and
	// interpreter are loaded (and, in a slow guest, while it still imports
	// its modules): the reports up to 4 s after both were first walked
	// whole are left out, by the windows' own times (a slow guest's
	// reports lag behind).
	everyOne := func(received func() []pprofile.Profiles, enough func(share float64, n int64) bool) func() bool {
		return func() bool {
			for _, p := range processes {
				if share, n, _ := pythonChain(received(), p.pid, fibLine, want); !enough(share, n) {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, everyOne(otlp.all, func(share float64, _ int64) bool { return share > 0 }),
		testutil.Patient(60*time.Second), 100*time.Millisecond, "no samples of the Python processes walked whole")
	from := latestWindow(otlp.all()).Add(4 * time.Second)
	later := func() []pprofile.Profiles { return windowsFrom(otlp.all(), from) }
	require.Eventually(t, everyOne(later, func(_ float64, n int64) bool { return n >= 300 }),
		60*time.Second, 500*time.Millisecond, "the OTLP endpoint received too few samples of the Python processes")

	var figures []string
	for _, p := range processes {
		share, n, example := pythonChain(later(), p.pid, fibLine, want)
		t.Logf("%s (pid %d): %.1f%% of %d samples whole", p.name, p.pid, 100*share, n)
		figures = append(figures, fmt.Sprintf("%s %.1f%%", p.name, 100*share))
		assert.GreaterOrEqual(t, share, 0.95, "%s: e.g. %s", p.name, example)
	}
	matrixFigure(t, "fib <- work <- main <- <module> whole: %s", strings.Join(figures, ", "))
	if hasFreeThreaded { // counted under its version, t for free-threaded
		text := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		version := fmt.Sprintf("version=%q", strings.TrimPrefix(freeThreaded.Name, "free-threaded-"))
		assert.Equal(t, 1.0, metricValue(text, "otelcol_bpfprofiler_python_processes", version), "free-threaded processes walked")
	}
	checkPprofPython(t, dir, lines)
}

// checkPprofPython checks that the pprof files name fib with its file and
// a line of it.
func checkPprofPython(t *testing.T, dir string, lines map[string]int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "cpu-*.pb.gz"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no pprof files")
	found := 0
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		prof, err := profile.Parse(r)
		r.Close()
		require.NoError(t, err)
		for _, loc := range prof.Location {
			for _, l := range loc.Line {
				if l.Function.Name == "work" && filepath.Base(l.Function.Filename) == "pywork.py" && l.Line == int64(lines["work_call"]) {
					found++
				}
			}
		}
	}
	assert.Positive(t, found, "no pprof location names work at pywork.py:%d", lines["work_call"])
}

// childOf returns the first child of pid (unshare's forked process), once
// it has exec'ed the interpreter.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	var child int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		child, _ = strconv.Atoi(f[0])
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child))
		return strings.Contains(filepath.Base(exe), "python")
	}, 10*time.Second, 20*time.Millisecond, "unshare started no interpreter")
	// Give it the time to start running Python.
	time.Sleep(500 * time.Millisecond)
	return child
}

// interpreterNamed returns the last interpreter whose name starts with
// prefix, or the last of all when none does.
func interpreterNamed(interpreters []testutil.Interpreter, prefix string) testutil.Interpreter {
	if in, ok := interpreterWithPrefix(interpreters, prefix); ok {
		return in
	}
	return interpreters[len(interpreters)-1]
}

// interpreterWithPrefix returns the last interpreter whose name starts
// with prefix, if one does.
func interpreterWithPrefix(interpreters []testutil.Interpreter, prefix string) (testutil.Interpreter, bool) {
	for i := len(interpreters) - 1; i >= 0; i-- {
		if strings.HasPrefix(interpreters[i].Name, prefix) {
			return interpreters[i], true
		}
	}
	return testutil.Interpreter{}, false
}

// latestWindow returns the start of the latest profile window received.
func latestWindow(received []pprofile.Profiles) time.Time {
	var latest time.Time
	for _, pd := range received {
		if t := windowOf(pd); t.After(latest) {
			latest = t
		}
	}
	return latest
}

// windowsFrom returns the reports whose window starts at from or later.
func windowsFrom(received []pprofile.Profiles, from time.Time) []pprofile.Profiles {
	var out []pprofile.Profiles
	for _, pd := range received {
		if !windowOf(pd).Before(from) {
			out = append(out, pd)
		}
	}
	return out
}

// windowOf returns the earliest start of the profiles of one report.
func windowOf(pd pprofile.Profiles) time.Time {
	var first time.Time
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				if t := prof.Time().AsTime(); first.IsZero() || t.Before(first) {
					first = t
				}
			}
		}
	}
	return first
}
