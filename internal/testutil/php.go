package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// PHP is a PHP CLI the tests run, unpacked from Debian's packages.
type PHP struct {
	Version string // "8.2"
	Path    string // the php program
	// FPM is its FastCGI process manager, php-fpm<version>.
	FPM string
	// ExtensionDir is its extension directory (opcache.so is there).
	ExtensionDir string
}

// PHPVersions are the PHP versions the tests run: Debian bookworm's 8.2
// and sid's 8.4 (8.4.27 on 2026-11-30; sid moves, the minor stays).
var PHPVersions = []string{"8.2", "8.4"}

// phpSuite is where each of PHPVersions comes from, and the shared
// libraries the program needs that the machine (bookworm) has not, by
// their Debian packages: sid's php links sid's sonames (libsodium.so.26,
// libxml2.so.16) and versions.
var phpSuite = map[string]struct {
	suite DebianSuite
	libs  []string
}{
	"8.2": {Bookworm, nil},
	"8.4": {Sid, []string{"libc6", "libedit2", "libbsd0", "libmd0", "libtinfo6", "libssl3t64", "libzstd1", "zlib1g",
		"libsodium26", "libpcre2-8-0", "libargon2-1", "libxml2-16", "libgcc-s1"}},
}

// PHPFromBookworm says whether PHP version comes from bookworm, the
// machine's own suite, and links its libraries.
func PHPFromBookworm(version string) bool {
	return phpSuite[version].suite.name == Bookworm.name
}

// DebianPHP returns Debian's php<version> CLI ("8.2" bookworm's, "8.4"
// sid's): its packages (php<version>-cli, -common, -opcache, -fpm)
// unpacked under DebianCacheEnv, a sid program pointed at sid's glibc as
// SidPython is. Args gives the flags that run it from there. Without the
// packages or patchelf the test is skipped, or fails under RequireBPFEnv.
func DebianPHP(t testing.TB, version string) PHP {
	t.Helper()
	p, err := DebianPHPOf(runtime.GOARCH, version)
	if err != nil {
		SkipOrFail(t, "Debian's PHP %s: %v", version, err)
	}
	return p
}

// DebianPHPOf is DebianPHP for the architecture arch ("amd64", "arm64").
func DebianPHPOf(arch, version string) (PHP, error) {
	src, ok := phpSuite[version]
	if !ok {
		return PHP{}, fmt.Errorf("no Debian PHP %s (there are %v)", version, PHPVersions)
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	loader := map[string]string{"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}[arch]
	if triplet == "" {
		return PHP{}, fmt.Errorf("no Debian PHP for %s", arch)
	}
	pkgs := []string{"php" + version + "-cli", "php" + version + "-common", "php" + version + "-opcache", "php" + version + "-fpm"}
	root, err := debianUnpack(src.suite, src.suite.cacheDir(arch), arch, "php"+version, append(pkgs, src.libs...))
	if err != nil {
		return PHP{}, err
	}
	path := filepath.Join(root, "usr/bin", "php"+version)
	fpm := filepath.Join(root, "usr/sbin", "php-fpm"+version)
	if src.suite.name != Bookworm.name {
		lib := filepath.Join(root, "usr/lib", triplet)
		for _, prog := range []string{path, fpm} {
			if err := pointAtLibc(prog, filepath.Join(lib, loader), lib); err != nil {
				return PHP{}, err
			}
		}
	}
	exts, _ := filepath.Glob(filepath.Join(root, "usr/lib/php/2*/opcache.so"))
	if len(exts) != 1 {
		return PHP{}, fmt.Errorf("php%s: want one opcache.so under %s/usr/lib/php, found %v", version, root, exts)
	}
	return PHP{Version: version, Path: path, FPM: fpm, ExtensionDir: filepath.Dir(exts[0])}, nil
}

// Args returns the flags that run p from where it is unpacked, before the
// script: no php.ini and no scanned ini directory (-n: the packages' ini
// files name /etc/php), its own extension directory; with opcache, the
// opcache extension loaded and enabled for the CLI, and its JIT (jit:
// "tracing", "function", or "" for none).
func (p PHP) Args(opcache bool, jit string) []string {
	// Startup warnings would come before the workload's "ready" (a machine
	// without tzdata, as the kernel matrix's guests: "Invalid
	// date.timezone value 'UTC'"): they are not shown.
	args := []string{"-n", "-d", "extension_dir=" + p.ExtensionDir, "-d", "display_startup_errors=0"}
	if !opcache {
		return args
	}
	args = append(args, "-d", "zend_extension="+filepath.Join(p.ExtensionDir, "opcache.so"),
		"-d", "opcache.enable=1", "-d", "opcache.enable_cli=1")
	if jit == "" {
		return append(args, "-d", "opcache.jit=off", "-d", "opcache.jit_buffer_size=0")
	}
	return append(args, "-d", "opcache.jit="+jit, "-d", "opcache.jit_buffer_size=64M")
}

// StartPHP runs testdata/workloads/phpwork.php under p with flags (Args)
// and args, waits for its "ready" line and returns the process (killed at
// cleanup).
func StartPHP(t testing.TB, p PHP, flags []string, args ...string) *exec.Cmd {
	t.Helper()
	return StartReadyWorkload(t, p.Path, append(append(append([]string{}, flags...), Workload(t, "phpwork.php")), args...)...)
}

// phpEmulationLibs are the Debian packages of the shared libraries an
// emulated php<version> needs beyond DebianPHPOf's, by version: sid's
// come with it (their RUNPATH names them, LD_LIBRARY_PATH the ones they
// need in turn), bookworm's php links the machine's own libraries, which
// another architecture's machine would have.
var phpEmulationLibs = map[string][]string{
	"8.2": {"libc6", "libxml2", "libicu72", "liblzma5", "libssl3", "libpcre2-8-0", "zlib1g", "libsodium23", "libargon2-1",
		"libgcc-s1", "libstdc++6"},
}

// qemuUser are the qemu-user programs (package qemu-user-static) that run
// another architecture's programs, by Debian architecture.
var qemuUser = map[string]string{"arm64": "qemu-aarch64-static"}

// EmulatedPHP returns Debian's PHP version for arch, not the machine's,
// and the command that runs its programs under qemu-user: the words
// before the program and its flags. The guest's addresses are the host
// process's (qemu-user maps a 64-bit guest at them when it can), so its
// memory is read through /proc/PID/mem of the qemu process as a native
// one's. Without qemu-user or the packages the test is skipped, or fails
// under RequireBPFEnv.
func EmulatedPHP(t testing.TB, arch, version string) (PHP, []string) {
	t.Helper()
	qemu, err := exec.LookPath(qemuUser[arch])
	if qemuUser[arch] == "" || err != nil {
		SkipOrFail(t, "no qemu-user for %s (package qemu-user-static): %v", arch, err)
	}
	p, err := DebianPHPOf(arch, version)
	if err != nil {
		SkipOrFail(t, "Debian's PHP %s (%s): %v", version, arch, err)
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(p.Path)))
	if libs := phpEmulationLibs[version]; libs != nil {
		root = DebianRoot(t, phpSuite[version].suite, arch, "php"+version+"-run", libs...)
	}
	triplet := map[string]string{"arm64": "aarch64-linux-gnu"}[arch]
	ldPath := filepath.Join(root, "usr/lib", triplet) + ":" + filepath.Join(root, "lib", triplet)
	return p, []string{qemu, "-L", root, "-E", "LD_LIBRARY_PATH=" + ldPath}
}
