package testutil

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Interpreter is a CPython interpreter the tests run.
type Interpreter struct {
	Name string // e.g. "3.12.1" (pyenv) or "debian-3.11"
	Path string
}

// PythonVersions are the pyenv versions the Python unwinder supports.
var PythonVersions = []string{"3.7.16", "3.8.18", "3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"}

// Interpreters returns the supported CPython interpreters of the machine:
// pyenv's (under $PYENV_ROOT or /root/.pyenv, as the project's machines
// have them), Debian's /usr/bin/python3.11 (a static, stripped build
// that make test installs), Debian sid's newer ones (SidPython), a
// free-threaded builds (FreeThreadedPythons) and one with a struct field
// moved (MovedFieldPython). Without pyenv, or one of PythonVersions, only
// the others are tested (logged); under RequireBPFEnv (CI, on the
// project's machines) that is a failure.
func Interpreters(t testing.TB) []Interpreter {
	t.Helper()
	if list := os.Getenv(PythonsEnv); list != "" {
		var out []Interpreter
		for _, p := range strings.Split(list, ",") {
			name, path, named := strings.Cut(p, "=")
			if !named {
				name, path = filepath.Base(p), p
			}
			out = append(out, Interpreter{Name: name, Path: path})
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
	for _, v := range SidPythonVersions {
		out = append(out, SidPython(t, v))
	}
	out = append(out, FreeThreadedPythons(t)...)
	out = append(out, MovedFieldPython(t))
	if len(out) == 0 {
		SkipOrFail(t, "no CPython interpreter (make test installs python3.11)")
	}
	return out
}

// PythonsEnv, when set, lists the interpreters Interpreters returns
// (comma-separated paths, each optionally named: "debian-3.11=/usr/bin/
// python3.11"): the kernel matrix's guests have Debian's and sid's newest.
const PythonsEnv = "BPFPROFILER_PYTHONS"

// DebianPython is Debian 12's CPython.
const DebianPython = "/usr/bin/python3.11"

// StartPython runs testdata/workloads/pywork.py under in with args, waits
// for its "ready" line and returns the process (killed at cleanup).
func StartPython(t testing.TB, in Interpreter, args ...string) *exec.Cmd {
	t.Helper()
	return StartReadyWorkload(t, in.Path, append([]string{Workload(t, "pywork.py")}, args...)...)
}

var lineMarker = regexp.MustCompile(`(?:#|//)\s*line:(\w+)\s*$`)

// PythonLines returns the lines of pywork.py marked "# line:NAME", by NAME.
func PythonLines(t testing.TB) map[string]int { return WorkloadLines(t, "pywork.py") }

// WorkloadLines returns the lines of the workload script name marked
// "# line:NAME" or "// line:NAME" (at their end), by NAME.
func WorkloadLines(t testing.TB, name string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(Workload(t, name))
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

// SidPythonVersions are the CPython minors of Debian sid the tests run
// (3.14.10 and 3.15.2 on 2026-11-29; sid moves, the minors stay).
var SidPythonVersions = []string{"3.14", "3.15"}

// SidPython returns Debian sid's python<version> ("3.14"): its packages and
// sid's glibc unpacked together under DebianCacheEnv, the program pointed
// at that glibc (patchelf: its ELF interpreter and library path), as a
// newer distribution's CPython runs in a container. Without the packages
// or patchelf the test is skipped, or fails under RequireBPFEnv.
func SidPython(t testing.TB, version string) Interpreter {
	t.Helper()
	in, _, err := SidPythonOf(runtime.GOARCH, version)
	if err != nil {
		SkipOrFail(t, "Debian sid's CPython %s: %v", version, err)
	}
	return in
}

// SidPythonOf is SidPython for the architecture arch ("amd64", "arm64"):
// the interpreter and the directory its files (and its glibc) are in.
func SidPythonOf(arch, version string) (Interpreter, string, error) {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	loader := map[string]string{"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}[arch]
	if triplet == "" {
		return Interpreter{}, "", fmt.Errorf("no Debian CPython for %s", arch)
	}
	// The minimal packages and the rest of the standard library (asyncio
	// is there).
	root, err := debianUnpack(Sid, Sid.cacheDir(arch), arch, "python"+version+"-stdlib",
		[]string{"python" + version + "-minimal", "libpython" + version + "-minimal", "libpython" + version + "-stdlib", "libc6"})
	if err != nil {
		return Interpreter{}, "", err
	}
	lib := filepath.Join(root, "usr/lib", triplet)
	path := filepath.Join(root, "usr/bin", "python"+version)
	if err := pointAtLibc(path, filepath.Join(lib, loader), lib); err != nil {
		return Interpreter{}, "", err
	}
	return Interpreter{Name: "sid-" + version, Path: path}, root, nil
}

// pointAtLibc sets the ELF interpreter of the program at path to loader
// and its library path to lib, unless done: on a copy, renamed over it, so
// a program running, or another test patching it, sees one or the other.
func pointAtLibc(path, loader, lib string) error {
	if interp, rpath, _ := linkedBy(path); interp == loader && rpath == lib {
		return nil // done (as in the kernel matrix's guests, which have no patchelf)
	}
	patchelf, err := exec.LookPath("patchelf")
	if err != nil {
		return fmt.Errorf("no patchelf (make test installs it): %w", err)
	}
	tmp := fmt.Sprintf("%s.patch-%d", path, os.Getpid())
	defer os.Remove(tmp)
	if out, err := RunWithin(exec.Command("cp", "-p", path, tmp), BuildTimeout); err != nil {
		return fmt.Errorf("cp %s: %w\n%s", path, err, out)
	}
	// DT_RPATH, not DT_RUNPATH: it finds the libraries of the libraries
	// too (sid's libcrypto needs sid's libzstd, which a machine of another
	// suite may not have).
	if out, err := RunWithin(exec.Command(patchelf, "--set-interpreter", loader, "--force-rpath", "--set-rpath", lib, tmp), BuildTimeout); err != nil {
		return fmt.Errorf("patchelf %s: %w\n%s", path, err, out)
	}
	return os.Rename(tmp, path)
}

// linkedBy returns the program interpreter, the DT_RPATH and the
// DT_RUNPATH of the ELF file at path, "" for those it lacks or cannot be
// read.
func linkedBy(path string) (interp, rpath, runPath string) {
	f, err := elf.Open(path)
	if err != nil {
		return "", "", ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP && p.Filesz < 4096 {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
	}
	if paths, err := f.DynString(elf.DT_RPATH); err == nil && len(paths) > 0 {
		rpath = paths[0]
	}
	if paths, err := f.DynString(elf.DT_RUNPATH); err == nil && len(paths) > 0 {
		runPath = paths[0]
	}
	return interp, rpath, runPath
}

// Minor returns the interpreter's minor version, from its name ("3.12.1",
// "debian-3.11", "sid-3.14", "python3.11"), or 0.
func (in Interpreter) Minor() int {
	m := minorOf.FindStringSubmatch(in.Name)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var minorOf = regexp.MustCompile(`(?:^|[^0-9.])3\.(\d+)`)
