package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Interpreter is a CPython interpreter the tests run.
type Interpreter struct {
	Name string // e.g. "3.12.1" (pyenv) or "debian-3.11"
	Path string
}

// PythonVersions are the pyenv versions the Python unwinder supports.
var PythonVersions = []string{"3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"}

// Interpreters returns the supported CPython interpreters of the machine:
// pyenv's (under $PYENV_ROOT or /root/.pyenv, as the project's machines
// have them) and Debian's /usr/bin/python3.11 (a static, stripped build
// that make test installs). Without pyenv, or one of PythonVersions, only
// the others are tested (logged); under RequireBPFEnv (CI, on the
// project's machines) that is a failure.
func Interpreters(t testing.TB) []Interpreter {
	t.Helper()
	if list := os.Getenv(PythonsEnv); list != "" {
		var out []Interpreter
		for _, p := range strings.Split(list, ",") {
			out = append(out, Interpreter{Name: filepath.Base(p), Path: p})
		}
		return out
	}
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		root = "/root/.pyenv"
	}
	var out []Interpreter
	if _, err := os.Stat(filepath.Join(root, "versions")); err != nil {
		if os.Getenv(RequireBPFEnv) == "1" {
			t.Fatalf("no pyenv at %s (the project's machines have CPython %s there)", root, strings.Join(PythonVersions, ", "))
		}
		t.Logf("no pyenv at %s: CPython %s are not tested", root, strings.Join(PythonVersions, ", "))
	} else {
		for _, v := range PythonVersions {
			p := filepath.Join(root, "versions", v, "bin", "python")
			if _, err := os.Stat(p); err != nil {
				if os.Getenv(RequireBPFEnv) == "1" {
					t.Fatalf("pyenv CPython %s: %v", v, err)
				}
				t.Logf("pyenv CPython %s is not tested: %v", v, err)
				continue
			}
			out = append(out, Interpreter{Name: v, Path: p})
		}
	}
	if _, err := os.Stat(DebianPython); err == nil {
		out = append(out, Interpreter{Name: "debian-3.11", Path: DebianPython})
	} else if os.Getenv(RequireBPFEnv) == "1" {
		t.Fatalf("Debian's CPython: %v (make test installs python3.11)", err)
	}
	if len(out) == 0 {
		SkipOrFail(t, "no CPython interpreter (make test installs python3.11)")
	}
	return out
}

// PythonsEnv, when set, lists the interpreters Interpreters returns
// (comma-separated paths): the kernel matrix's guests have Debian's only.
const PythonsEnv = "BPFPROFILER_PYTHONS"

// DebianPython is Debian 12's CPython.
const DebianPython = "/usr/bin/python3.11"

// StartPython runs testdata/workloads/pywork.py under in with args, waits
// for its "ready" line and returns the process (killed at cleanup).
func StartPython(t testing.TB, in Interpreter, args ...string) *exec.Cmd {
	t.Helper()
	return StartReadyWorkload(t, in.Path, append([]string{Workload(t, "pywork.py")}, args...)...)
}

var lineMarker = regexp.MustCompile(`#\s*line:(\w+)\s*$`)

// PythonLines returns the lines of pywork.py marked "# line:NAME", by NAME.
func PythonLines(t testing.TB) map[string]int {
	t.Helper()
	b, err := os.ReadFile(Workload(t, "pywork.py"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for i, l := range strings.Split(string(b), "\n") {
		if m := lineMarker.FindStringSubmatch(l); m != nil {
			lines[m[1]] = i + 1
		}
	}
	return lines
}
