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

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// runtimeUnderTest is one process of TestCollectorNamesRuntimesByContent
// and how its hot chain is told: the share of its samples naming the hot
// function that are whole, their number and an example of one that is not.
type runtimeUnderTest struct {
	name  string
	pid   int
	chain func(received []pprofile.Profiles, pid int) (float64, int64, string)
}

// Runtimes are recognised by what their files are, not their names, and
// what is learned of a file under one name serves its copies under others:
// node copied to other names (an application's own binary, as vendored
// runtimes are) beside the node it was copied from, with and without
// --perf-basic-prof each way round; a Node single executable application
// (node 22's blob put into a copy of node by postject); Debian's
// CPython (the interpreter in the executable) and pyenv's (in libpython)
// under names of their own; a JDK moved and its launcher renamed. All run
// at once under one collector; each names its hot chain in at least 90% of
// the samples naming its hot function.
func TestCollectorNamesRuntimesByContent(t *testing.T) {
	bin := collectorBinary(t)
	dir := t.TempDir()
	node := testutil.Node(t, 22)
	script := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "nodechain.js")
	interpreters := testutil.Interpreters(t)
	lines := testutil.PythonLines(t)
	jdk := testutil.JDKs(t)[0]

	var procs []runtimeUnderTest
	start := func(name string, chain func([]pprofile.Profiles, int) (float64, int64, string), path string, args ...string) {
		// In a directory of its own: node with --perf-basic-prof writes
		// an isolate log where it runs.
		cmd := exec.Command(path, args...)
		cmd.Dir = t.TempDir()
		c := testutil.StartChild(t, cmd)
		procs = append(procs, runtimeUnderTest{name, c.Pid(), chain})
	}
	js := func(received []pprofile.Profiles, pid int) (float64, int64, string) {
		return nodeChain(received, pid, nodechainBodies)
	}
	myservice := copyExecutable(t, node, filepath.Join(dir, "opt", "app", "bin", "myservice"))
	worker := copyExecutable(t, node, filepath.Join(dir, "srv", "worker"))
	start("node copied as myservice", js, myservice, script, "600")
	start("node beside it, --perf-basic-prof", js, node, "--perf-basic-prof", script, "600")
	start("node beside a copy, plain", js, node, script, "600")
	start("node copied as worker, --perf-basic-prof", js, worker, "--perf-basic-prof", script, "600")
	start("a Node single executable application (postject)", js, testutil.NodeSEA(t, node, script, "checkout"), "600")

	py := func(received []pprofile.Profiles, pid int) (float64, int64, string) {
		return pythonChain(received, pid, int64(lines["fib_recurse"]), pyworkChain(lines))
	}
	pywork := testutil.Workload(t, "pywork.py")
	// Debian's holds CPython in its executable, pyenv's in libpython
	// (found by the executable's absolute run path).
	debian, pyenv := interpreterNamed(interpreters, "debian-"), interpreterNamed(interpreters, "3.")
	start(debian.Name+" copied as pyservice", py, copyExecutable(t, debian.Path, filepath.Join(dir, "usr", "local", "bin", "pyservice")), pywork, "fib", "600")
	if pyenv != debian {
		start(pyenv.Name+" copied as pyworker", py, copyExecutable(t, pyenv.Path, filepath.Join(dir, "home", "app", "bin", "pyworker")), pywork, "fib", "600")
	}

	movedJDK := filepath.Join(dir, "opt", "runtime")
	copyTree(t, jdk, movedJDK)
	launcher := filepath.Join(movedJDK, "bin", "myapp")
	require.NoError(t, os.Rename(filepath.Join(movedJDK, "bin", "java"), launcher))
	start("a moved JDK's launcher as myapp", func(received []pprofile.Profiles, pid int) (float64, int64, string) {
		return javaChain(received, pid, javaInlineChain)
	}, launcher, append(slices.Clone(javaInlineFlags), append(testutil.JavaWorkload(t, "JavaInline"), "600")...)...)

	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = fmt.Sprint(p.pid)
	}
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%s]}
    cpu: {samples_per_second: 99}
`, strings.Join(pids, ", ")), addr))
	waitReady(t, out)

	// From when every process is walked (the JVM compiles its code first),
	// 300 samples of each.
	ready := func(received []pprofile.Profiles) bool {
		for _, p := range procs {
			if share, _, _ := p.chain(received, p.pid); share <= 0.5 {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, func() bool { return ready(otlp.all()) }, testutil.Patient(3*time.Minute), 500*time.Millisecond) {
		for _, p := range procs {
			share, n, example := p.chain(otlp.all(), p.pid)
			t.Logf("%s (pid %d): %.1f%% of %d whole, e.g. %s", p.name, p.pid, 100*share, n, example)
		}
		t.FailNow()
	}
	skip := len(otlp.all())
	later := func() []pprofile.Profiles { return otlp.all()[skip:] }
	require.Eventually(t, func() bool {
		for _, p := range procs {
			if _, n, _ := p.chain(later(), p.pid); n < 300 {
				return false
			}
		}
		return true
	}, testutil.Patient(2*time.Minute), 500*time.Millisecond, "too few samples of the runtimes")
	for _, p := range procs {
		share, n, example := p.chain(later(), p.pid)
		t.Logf("%s (pid %d): %.1f%% of %d samples whole", p.name, p.pid, 100*share, n)
		assert.GreaterOrEqual(t, share, 0.9, "%s: e.g. %s", p.name, example)
	}
}

// copyExecutable copies the file at from to to, executable.
func copyExecutable(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	require.NoError(t, os.WriteFile(to, b, 0o755))
	return to
}

// copyTree copies the directory from to to with its links (hard links
// where it can: a JDK is 300 MB).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	if _, err := testutil.RunWithin(exec.Command("cp", "-al", from+"/.", to), time.Minute); err == nil {
		return
	}
	require.NoError(t, os.RemoveAll(to))
	b, err := testutil.RunWithin(exec.Command("cp", "-a", from+"/.", to), testutil.Patient(5*time.Minute))
	require.NoError(t, err, "%s", b)
}
