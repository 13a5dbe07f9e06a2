package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// DebianCacheEnv names the directory Debian packages are downloaded and
// unpacked in (default /var/cache/bpfprofiler-test/debian).
const DebianCacheEnv = "BPFPROFILER_DEBIAN_CACHE"

// debianBookworm are the suites packages come from: bookworm and its
// updates, so that a package is the one a bookworm machine runs.
const debianBookworm = `Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

// debianSid is Debian's unstable suite, where newer runtimes are.
const debianSid = `Types: deb
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

// DebianSuite is where packages come from: Bookworm (the machine's own
// release) or Sid.
type DebianSuite struct {
	name    string
	sources string
}

var (
	Bookworm = DebianSuite{"bookworm", debianBookworm}
	Sid      = DebianSuite{"sid", debianSid}
)

// cacheDir is the suite's cache for arch under DebianCacheEnv.
func (s DebianSuite) cacheDir(arch string) string {
	dir := os.Getenv(DebianCacheEnv)
	if dir == "" {
		dir = "/var/cache/bpfprofiler-test/debian"
	}
	if s.name == Bookworm.name {
		return filepath.Join(dir, arch)
	}
	return filepath.Join(dir, s.name+"-"+arch)
}

// DebianPackage returns the directory Debian bookworm's package pkg of
// arch ("arm64", "amd64"...) is unpacked in (dpkg-deb -x), downloading it
// once into DebianCacheEnv with apt-get on a private configuration, the
// system's left alone. Without it (no network, no apt), the test is
// skipped, or fails under RequireBPFEnv.
func DebianPackage(t testing.TB, arch, pkg string) string {
	t.Helper()
	return DebianRoot(t, Bookworm, arch, pkg, pkg)
}

// DebianRoot returns the directory the packages pkgs of suite and arch
// are unpacked in together, as name (one file tree, as a machine would
// have them installed), downloading them once as DebianPackage does.
func DebianRoot(t testing.TB, suite DebianSuite, arch, name string, pkgs ...string) string {
	t.Helper()
	root, err := debianUnpack(suite, suite.cacheDir(arch), arch, name, pkgs)
	if err != nil {
		SkipOrFail(t, "Debian %s packages %v (%s): %v", suite.name, pkgs, arch, err)
	}
	return root
}

// debianUnpack unpacks pkgs under dir/pkg/name unless it is there, one
// process at a time (apt's lists and the unpacking are shared).
func debianUnpack(suite DebianSuite, dir, arch, name string, pkgs []string) (string, error) {
	root := filepath.Join(dir, "pkg", name)
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial", "debs", "pkg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(root); err == nil { // unpacked while we waited
		return root, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(dir, "pkg"), ".unpack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, pkg := range pkgs {
		deb, err := downloadDeb(suite, dir, arch, pkg)
		if err != nil {
			return "", err
		}
		if out, err := RunWithin(exec.Command("dpkg-deb", "-x", deb, tmp), BuildTimeout); err != nil {
			return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, out)
		}
	}
	return root, os.Rename(tmp, root)
}

// downloadDeb returns the .deb of pkg in dir/debs, running apt-get update
// (when there are no lists, or they are too old for the download) and
// apt-get download when it is not there.
func downloadDeb(suite DebianSuite, dir, arch, pkg string) (string, error) {
	debs := filepath.Join(dir, "debs")
	if found, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb")); len(found) > 0 {
		return found[0], nil
	}
	sources := filepath.Join(dir, "sources.sources")
	if err := os.WriteFile(sources, []byte(suite.sources), 0o644); err != nil {
		return "", err
	}
	aptGet := func(cmd ...string) error {
		c := exec.Command("apt-get", append([]string{
			"-o", "Dir::Etc::sourcelist=" + sources,
			"-o", "Dir::Etc::sourceparts=-",
			"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
			"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
			"-o", "APT::Architecture=" + arch,
			"-o", "APT::Architectures=" + arch,
			"-o", "APT::Sandbox::User=root",
		}, cmd...)...)
		c.Dir = debs
		if out, err := RunWithin(c, BuildTimeout); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(cmd, " "), err, out)
		}
		return nil
	}
	stamp := filepath.Join(dir, "lists", ".updated")
	update := func() error {
		if err := aptGet("update"); err != nil {
			return err
		}
		return os.WriteFile(stamp, nil, 0o644)
	}
	if _, err := os.Stat(stamp); err != nil {
		if err := update(); err != nil {
			return "", err
		}
	}
	if err := aptGet("download", pkg); err != nil {
		// The lists may name a version the mirror no longer has.
		if err := update(); err != nil {
			return "", err
		}
		if err := aptGet("download", pkg); err != nil {
			return "", err
		}
	}
	found, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(found) == 0 {
		return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, debs)
	}
	return found[0], nil
}
