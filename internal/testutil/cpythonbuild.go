package testutil

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPythonBuildVersion is the CPython release the tests build from source
// (free-threaded, and with a struct field moved): the newest tag of
// github.com/python/cpython the Go module proxy served on 2026-11-29. Its
// source comes through the go command, which checks it against the
// checksum database: the pin is the version.
const CPythonBuildVersion = "3.14.7"

// CPython313BuildVersion is the newest 3.13 tag the proxy served that day,
// built free-threaded too (3.13's experimental free-threaded build).
const CPython313BuildVersion = "3.13.15"

// FreeThreadedVersions are the releases FreeThreadedPythons builds.
var FreeThreadedVersions = []string{CPython313BuildVersion, CPythonBuildVersion}

// CPythonCacheEnv names the directory CPython builds are kept in (default
// /var/cache/bpfprofiler-test/cpython).
const CPythonCacheEnv = "BPFPROFILER_CPYTHON_CACHE"

// cpythonBuildTimeout bounds a build: 3.5 minutes on two idle cores.
const cpythonBuildTimeout = 30 * time.Minute

// FreeThreadedPython returns CPython release (one of
// FreeThreadedVersions) built free-threaded ("python3.14t"), building it
// once under CPythonCacheEnv. Without the go command, a C compiler or the
// module proxy, the test is skipped, or fails under RequireBPFEnv.
func FreeThreadedPython(t testing.TB, release string) Interpreter {
	t.Helper()
	minor := release[:len("3.14")]
	in, err := cpythonBuild("free-threaded-"+minor+"t", release, release+"t", []string{"--disable-gil"}, nil)
	if err != nil {
		SkipOrFail(t, "free-threaded CPython %s: %v", release, err)
	}
	return in
}

// FreeThreadedPythons returns every release of FreeThreadedVersions built
// free-threaded, oldest first.
func FreeThreadedPythons(t testing.TB) []Interpreter {
	t.Helper()
	var out []Interpreter
	for _, v := range FreeThreadedVersions {
		out = append(out, FreeThreadedPython(t, v))
	}
	return out
}

// MovedFieldPython returns CPython CPythonBuildVersion (a default build)
// with a field added to PyThreadState before the ones the Python walk reads
// (thread_id, current_frame: MovedFieldBytes later than in the release), as
// a distribution's patched build may have; built once like
// FreeThreadedPython.
func MovedFieldPython(t testing.TB) Interpreter {
	t.Helper()
	minor := CPythonBuildVersion[:len("3.14")]
	in, err := cpythonBuild("moved-field-"+minor, CPythonBuildVersion, CPythonBuildVersion+"-moved", nil, moveThreadStateFields)
	if err != nil {
		SkipOrFail(t, "CPython %s with a field added: %v", CPythonBuildVersion, err)
	}
	return in
}

// MovedFieldBytes is how much later MovedFieldPython's PyThreadState
// fields after next are.
const MovedFieldBytes = 8

// moveThreadStateFields adds a pointer after PyThreadState.next.
func moveThreadStateFields(src string) error {
	path := filepath.Join(src, "Include", "cpython", "pystate.h")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	const next = "    PyThreadState *next;\n"
	if strings.Count(string(b), next) != 1 {
		return fmt.Errorf("%s: PyThreadState.next not found once", path)
	}
	patched := strings.Replace(string(b), next, next+"    void *bpfprofiler_added; /* moves every later field */\n", 1)
	return os.WriteFile(path, []byte(patched), 0o644)
}

// cpythonBuild builds CPython release's source, patched by
// patch when set, configured with args, in the directory dirName under
// CPythonCacheEnv unless it is there, and returns its interpreter (run
// from the build directory, which finds its standard library beside it:
// no install, no byte-compiling of the library).
func cpythonBuild(name, release, dirName string, args []string, patch func(src string) error) (Interpreter, error) {
	cache := os.Getenv(CPythonCacheEnv)
	if cache == "" {
		cache = "/var/cache/bpfprofiler-test/cpython"
	}
	dir := filepath.Join(cache, dirName)
	in := Interpreter{Name: name, Path: filepath.Join(dir, "python")}
	if _, err := os.Stat(in.Path); err == nil {
		return in, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return in, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return in, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return in, err
	}
	if _, err := os.Stat(in.Path); err == nil { // built while we waited
		return in, nil
	}
	build, err := buildCPython(cache, release, args, patch)
	if build != "" {
		defer os.RemoveAll(build)
	}
	if err != nil {
		return in, err
	}
	if err := os.RemoveAll(dir); err != nil { // a build of another layout
		return in, err
	}
	return in, os.Rename(build, dir)
}

// buildCPython copies release's source into a new directory under cache,
// patches it and builds it there, and returns the directory.
func buildCPython(cache, release string, args []string, patch func(src string) error) (string, error) {
	src, err := cpythonSource(cache, release)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(work, "cpython")
	if out, err := RunWithin(exec.Command("cp", "-r", src, dir), BuildTimeout); err != nil {
		return work, fmt.Errorf("copy %s: %w\n%s", src, err, out)
	}
	if err := executableScripts(dir); err != nil {
		return work, err
	}
	if patch != nil {
		if err := patch(dir); err != nil {
			return work, err
		}
	}
	deadline := time.Now().Add(cpythonBuildTimeout)
	configure := append([]string{"./configure", "--without-ensurepip", "--disable-test-modules"}, args...)
	for _, argv := range [][]string{configure, {"make", "-j" + strconv.Itoa(runtime.NumCPU())}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		if out, err := RunWithin(cmd, time.Until(deadline)); err != nil {
			tail := out[max(0, len(out)-4000):]
			return work, fmt.Errorf("%v: %w\n%s", argv, err, tail)
		}
	}
	// The build directory alone, so that a rename moves it into place.
	final := filepath.Join(cache, ".built-"+filepath.Base(work))
	if err := os.Rename(dir, final); err != nil {
		return work, err
	}
	os.RemoveAll(work)
	return final, nil
}

// cpythonSource returns the directory the go command unpacked CPython
// release's source in (its module cache, read-only).
func cpythonSource(cache, release string) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to download the source: %w", err)
	}
	mod := "github.com/python/cpython@v" + release + "+incompatible"
	cmd := exec.Command(goCmd, "mod", "download", "-json", mod)
	cmd.Dir = cache // outside any module
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=on")
	out, err := RunWithin(cmd, BuildTimeout)
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s\n%s", mod, err, info.Error, out)
	}
	return info.Dir, nil
}

// executableScripts makes the files of dir that start with "#!"
// executable, and every file writable: module zips keep neither bit.
func executableScripts(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if err == nil {
				err = os.Chmod(path, 0o755)
			}
			return err
		}
		mode := os.FileMode(0o644)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		head := make([]byte, 2)
		n, _ := f.Read(head)
		f.Close()
		if n == 2 && string(head) == "#!" {
			mode = 0o755
		}
		return os.Chmod(path, mode)
	})
}
