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
	"syscall"
	"testing"
	"time"
)

// FreeThreadedVersion is the CPython release the tests build free-threaded
// (./configure --disable-gil, PEP 703): the newest tag of
// github.com/python/cpython the Go module proxy served on 2026-11-29. Its
// source comes through the go command, which checks it against the
// checksum database: the pin is the version.
const FreeThreadedVersion = "3.14.7"

// CPythonCacheEnv names the directory CPython builds are kept in (default
// /var/cache/bpfprofiler-test/cpython).
const CPythonCacheEnv = "BPFPROFILER_CPYTHON_CACHE"

// freeThreadedBuildTimeout bounds the build: 3.5 minutes on two idle cores.
const freeThreadedBuildTimeout = 30 * time.Minute

// FreeThreadedPython returns CPython FreeThreadedVersion built
// free-threaded ("python3.14t"), building it once under CPythonCacheEnv.
// Without the go command, a C compiler or the module proxy, the test is
// skipped, or fails under RequireBPFEnv.
func FreeThreadedPython(t testing.TB) Interpreter {
	t.Helper()
	in, _, err := FreeThreadedPythonBuild()
	if err != nil {
		SkipOrFail(t, "free-threaded CPython %s: %v", FreeThreadedVersion, err)
	}
	return in
}

// FreeThreadedPythonBuild is FreeThreadedPython for callers without a
// test: the interpreter and its installation directory (its prefix).
func FreeThreadedPythonBuild() (Interpreter, string, error) {
	cache := os.Getenv(CPythonCacheEnv)
	if cache == "" {
		cache = "/var/cache/bpfprofiler-test/cpython"
	}
	prefix := filepath.Join(cache, FreeThreadedVersion+"t")
	minor := FreeThreadedVersion[:len("3.14")]
	in := Interpreter{Name: "free-threaded-" + minor + "t", Path: filepath.Join(prefix, "bin", "python"+minor+"t")}
	done := filepath.Join(prefix, ".complete")
	if _, err := os.Stat(done); err == nil {
		return in, prefix, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return in, prefix, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return in, prefix, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return in, prefix, err
	}
	if _, err := os.Stat(done); err == nil { // built while we waited
		return in, prefix, nil
	}
	if err := buildFreeThreaded(cache, prefix); err != nil {
		return in, prefix, err
	}
	return in, prefix, os.WriteFile(done, nil, 0o644)
}

// buildFreeThreaded downloads the source and builds and installs it in
// prefix (emptied first: a build cut short leaves no .complete).
func buildFreeThreaded(cache, prefix string) error {
	src, err := cpythonSource(cache)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "cpython")
	if out, err := RunWithin(exec.Command("cp", "-r", src, dir), BuildTimeout); err != nil {
		return fmt.Errorf("copy %s: %w\n%s", src, err, out)
	}
	if err := executableScripts(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(prefix); err != nil {
		return err
	}
	deadline := time.Now().Add(freeThreadedBuildTimeout)
	for _, args := range [][]string{
		{"./configure", "--disable-gil", "--without-ensurepip", "--prefix=" + prefix},
		{"make", "-j" + strconv.Itoa(runtime.NumCPU())},
		{"make", "install"},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := RunWithin(cmd, time.Until(deadline)); err != nil {
			tail := out[max(0, len(out)-4000):]
			return fmt.Errorf("%v: %w\n%s", args, err, tail)
		}
	}
	return nil
}

// cpythonSource returns the directory the go command unpacked CPython
// FreeThreadedVersion's source in (its module cache, read-only).
func cpythonSource(cache string) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to download the source: %w", err)
	}
	mod := "github.com/python/cpython@v" + FreeThreadedVersion + "+incompatible"
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
