package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Ruby is a CRuby interpreter the tests run, unpacked from Debian's
// packages (the system's Ruby, if any, is left alone).
type Ruby struct {
	Name    string // "bookworm-3.1", "sid-3.3"
	Version string // "3.1", "3.3": the minor, as Debian's package names it
	Path    string // the ruby program
	Lib     string // libruby-<version>.so, which holds the VM
	// Args come before a script: the unpacked standard library on the
	// load path (the program looks for it under /usr, where it is not).
	Args []string
}

// RubyVersions are the CRuby minors the tests run, with the Debian suite
// each comes from: bookworm's 3.1 and sid's 3.3 (3.3.8 on 2026-11-30; sid
// carries no 3.4 or newer that day).
var RubyVersions = []struct {
	Suite   DebianSuite
	Version string
}{{Bookworm, "3.1"}, {Sid, "3.3"}}

// RubyInterpreters returns every Ruby of RubyVersions (RubyOf each).
// Without the packages or patchelf the test is skipped, or fails under
// RequireBPFEnv.
func RubyInterpreters(t testing.TB) []Ruby {
	t.Helper()
	var out []Ruby
	for _, v := range RubyVersions {
		r, err := RubyOf(v.Suite, runtime.GOARCH, v.Version)
		if err != nil {
			SkipOrFail(t, "Debian %s's Ruby %s: %v", v.Suite.name, v.Version, err)
		}
		out = append(out, r)
	}
	return out
}

// RubyOf returns Debian suite's ruby<version> ("3.1") for arch: the
// packages ruby<version> and libruby<version> unpacked together under
// DebianCacheEnv, the program pointed at its libruby (and, from sid, at
// sid's glibc, as SidPython is) with patchelf.
func RubyOf(suite DebianSuite, arch, version string) (Ruby, error) {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	loader := map[string]string{"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}[arch]
	if triplet == "" {
		return Ruby{}, fmt.Errorf("no Debian Ruby for %s", arch)
	}
	pkgs := []string{"ruby" + version, "libruby" + version}
	if suite.name == Sid.name {
		// sid's glibc, and the libraries libruby needs that bookworm's are
		// too old for.
		pkgs = append(pkgs, "libc6", "libgmp10", "libcrypt1", "zlib1g")
	}
	root, err := debianUnpack(suite, suite.cacheDir(arch), arch, "ruby"+version, pkgs)
	if err != nil {
		return Ruby{}, err
	}
	lib := filepath.Join(root, "usr/lib", triplet)
	r := Ruby{
		Name:    suite.name + "-" + version,
		Version: version,
		Path:    filepath.Join(root, "usr/bin", "ruby"+version),
		Lib:     filepath.Join(lib, "libruby-"+version+".so."+version),
		Args: []string{
			"-I", filepath.Join(root, "usr/lib/ruby", version+".0"),
			"-I", filepath.Join(lib, "ruby", version+".0"),
			"--disable-gems",
		},
	}
	if _, err := os.Stat(r.Lib); err != nil {
		return Ruby{}, err
	}
	if suite.name == Sid.name {
		err = pointAtLibc(r.Path, filepath.Join(lib, loader), lib)
	} else {
		err = setRunPath(r.Path, lib)
	}
	if err != nil {
		return Ruby{}, err
	}
	return r, nil
}

// setRunPath sets the library path of the program at path to lib unless
// done, on a copy renamed over it as pointAtLibc does.
func setRunPath(path, lib string) error {
	if _, rpath, runPath := linkedBy(path); runPath == lib || rpath == lib {
		return nil
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
	if out, err := RunWithin(exec.Command(patchelf, "--set-rpath", lib, tmp), BuildTimeout); err != nil {
		return fmt.Errorf("patchelf %s: %w\n%s", path, err, out)
	}
	return os.Rename(tmp, path)
}

// StartRuby runs testdata/workloads/rubywork.rb under r with args (after
// the Ruby's own, then extra, such as --yjit, before the script), waits
// for its "ready" line and returns the process (killed at cleanup).
func StartRuby(t testing.TB, r Ruby, extra []string, args ...string) *exec.Cmd {
	t.Helper()
	argv := append(append(append([]string{}, r.Args...), extra...), Workload(t, "rubywork.rb"))
	return StartReadyWorkload(t, r.Path, append(argv, args...)...)
}
