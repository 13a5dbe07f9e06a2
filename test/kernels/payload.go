package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// check is one column of the table: a test of one of the test binaries.
type check struct {
	name   string   // column title
	binary string   // test binary in the payload's /bin
	test   string   // test function
	arches []string // the architectures it runs on (n/a on others); nil: all
}

// runsOn reports whether c is checked on architecture arch, in a guest or
// on the host.
func (c check) runsOn(arch string, host bool) bool {
	onArch := c.arches == nil || slices.Contains(c.arches, arch)
	return onArch && (!host || !guestOnly[c.test])
}

// checksOn returns the checks run on architecture arch, in a guest or on
// the host.
func checksOn(arch string, host bool) []check {
	var out []check
	for _, c := range checks {
		if c.runsOn(arch, host) {
			out = append(out, c)
		}
	}
	return out
}

// checks are the end-to-end checks run on every kernel, in table order.
var checks = []check{
	{"programs load", "bpf.test", "TestProgramsLoad", nil},
	{"stack store", "bpf.test", "TestStackStoreHelpers", nil},
	{"cpu 75/25, chains", "e2e.test", "TestCollectorEndToEnd", nil},
	{"leaf callers", "e2e.test", "TestCollectorKeepsLeafCallers", nil},
	{"no frame pointers", "e2e.test", "TestCollectorUnwindsWithoutFramePointers", nil},
	{"off-cpu 3:1", "e2e.test", "TestCollectorOffCPUProfile", nil},
	{"probe", "e2e.test", "TestCollectorProbeLogs", nil},
	{"go probe", "e2e.test", "TestCollectorGoProbeLogs", nil},
	{"pid namespace", "e2e.test", "TestCollectorInsidePIDNamespace", nil},
	{"python", "e2e.test", "TestCollectorPythonFrames", nil},
	{"samples linked to scopes", "e2e.test", "TestCollectorLinksSamplesToScopes", nil},
	{"thread context", "e2e.test", "TestCollectorLinksSamplesToThreadContext", nil},
	{"go labels", "e2e.test", "TestCollectorCarriesGoLabels", nil},
	{"go heap", "e2e.test", "TestCollectorGoHeapProfiles", nil},
	{"usdt", "e2e.test", "TestCollectorUSDTProbes", nil},
	{"readers", "readbench.test", "TestReadersReadWhatTheThreadPublishes", nil},
	{"java", "e2e.test", "TestCollectorJavaFrames", nil},
	{"node", "e2e.test", "TestCollectorNodeFrames", nil},
	{"ruby, php", "e2e.test", "TestCollectorRubyAndPHPFrames", nil},
	// Last: it raises the guest's lockdown for good.
	{"lockdown", "e2e.test", "TestCollectorUnderLockdown", nil},
}

// guestOnly are the checks that change the kernel until it reboots
// (lockdown is raised, never lowered): run in the guests, where the init
// script sets testutil.DisposableKernelEnv, never on the host.
var guestOnly = map[string]bool{"TestCollectorUnderLockdown": true}

// checkMinutes are the go test timeouts of checks that need more than
// the 5 minutes (times the architecture's patience) every other has: the
// Go labels check may wait 2 minutes for the collector and then up to
// 220 s for its samples, under emulation beside four CPU-bound workloads.
var checkMinutes = map[string]int{"TestCollectorCarriesGoLabels": 8, "TestCollectorJavaFrames": 8, "TestCollectorNodeFrames": 8,
	"TestCollectorRubyAndPHPFrames": 8}

// minutes is c's go test timeout, before patience.
func (c check) minutes() int {
	if m, ok := checkMinutes[c.test]; ok {
		return m
	}
	return 5
}

// stressChecks run only when -checks names them: they repeat one
// operation to find out how a kernel (or qemu) fails at it, and are not
// part of the table CI requires.
var stressChecks = []check{
	// Attach and detach sched_switch programs under heavy switching
	// (rounds from BPFPROFILER_DETACH_ROUNDS, see -env).
	{"detach stress", "offcpu.test", "TestDetachUnderSwitches", nil},
}

// selectChecks makes checks the ones named (by column or test name) in
// names, in the order given; empty names keep the table's checks.
func selectChecks(names []string) error {
	if len(names) == 0 {
		return nil
	}
	all := append(slices.Clone(checks), stressChecks...)
	var chosen []check
	for _, n := range names {
		i := slices.IndexFunc(all, func(c check) bool {
			return c.name == n || c.test == n || strings.HasPrefix(c.name, n+" ") || strings.HasPrefix(c.name, n+",")
		})
		if i < 0 {
			return fmt.Errorf("-checks: no check named %q", n)
		}
		chosen = append(chosen, all[i])
	}
	checks = chosen
	return nil
}

// testPackages are the packages compiled into the test binaries of checks.
var testPackages = map[string]string{
	"bpf.test": "./bpf", "e2e.test": "./test/e2e", "offcpu.test": "./internal/offcpu", "readbench.test": "./internal/readbench",
}

// extraEnv is added to the test binaries' environment (-env).
var extraEnv []string

// busyboxApplets are the commands the guest's init and the tests run.
var busyboxApplets = []string{
	"sh", "mount", "mkdir", "ip", "hostname", "uname", "echo", "cat", "poweroff", "sleep", "unshare", "sysctl", "ls",
}

// payload is what every run of the checks on one architecture needs.
type payload struct {
	arch      *arch
	root      string // the guest's root file system
	initramfs string // root packed for qemu
}

const (
	guestCollector = "/bin/otelcol-bpfprofiler"
	guestWorkloads = "/workloads"
)

// buildPayload assembles the guest root of architecture a under dir:
// busybox, the collector, the test binaries (static, CGO_ENABLED=0), the C
// workloads compiled with the tests' flags, the Go labels workloads built
// by each Go release, the shared libraries they load, and /init. The userland (busybox, glibc, CPython) is the host's for
// its own architecture, Debian bookworm's packages for another.
func buildPayload(ctx context.Context, dir, collector, cacheDir string, a *arch) (*payload, error) {
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "run", guestWorkloads[1:]} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	u := userland{arch: a, sysroot: "/"}
	busybox, err := exec.LookPath("busybox")
	if err != nil && a.host() {
		return nil, fmt.Errorf("busybox (Debian's busybox-static) is needed for the guest: %w", err)
	}
	if !a.host() {
		if u, err = unpackUserland(ctx, cacheDir, a, filepath.Join(dir, "userland")); err != nil {
			return nil, fmt.Errorf("the %s userland (Debian packages): %w", a.name, err)
		}
		busybox = u.path("/bin/busybox")
	}
	if err := copyFile(busybox, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return nil, err
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			return nil, err
		}
	}
	if err := copyFile(collector, filepath.Join(root, guestCollector), 0o755); err != nil {
		return nil, fmt.Errorf("the %s collector (GOARCH=%[1]s make collector): %w", a.name, err)
	}
	built := map[string]bool{}
	for _, c := range checks {
		bin, pkg := c.binary, testPackages[c.binary]
		if built[bin] {
			continue
		}
		built[bin] = true
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", filepath.Join(root, "bin", bin), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+a.name)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go test -c %s: %w\n%s", pkg, err, out)
		}
	}
	sources, err := filepath.Glob("testdata/workloads/*.c")
	if err != nil || len(sources) == 0 {
		return nil, fmt.Errorf("no C workloads in testdata/workloads (run from the repository root): %v", err)
	}
	var bins []string
	for _, src := range sources {
		out := filepath.Join(root, guestWorkloads[1:], strings.TrimSuffix(filepath.Base(src), ".c"))
		if err := testutil.CrossCompileC(a.name, src, out); err != nil {
			return nil, err
		}
		bins = append(bins, out)
	}
	// The USDT check's program and library: <sys/sdt.h> is in the host's
	// multiarch include directory, which a cross compiler does not search
	// (the header is the same for every architecture).
	for src, name := range testutil.SDTPairFiles {
		out := filepath.Join(root, guestWorkloads[1:], name)
		if err := testutil.CrossCompileC(a.name, filepath.Join("testdata/workloads/usdt", src), out, "-idirafter", sdtIncludeDir()); err != nil {
			return nil, err
		}
		bins = append(bins, out)
	}
	// The Go labels check's programs, built for the guest by each Go release.
	for _, b := range guestGoLabelBuilds() {
		out := filepath.Join(root, guestWorkloads[1:], b.FileName("golabels"))
		if err := testutil.CrossBuildGo("testdata/workloads/golabels", out, a.name, b); err != nil {
			return nil, err
		}
		if b.Cgo {
			bins = append(bins, out) // its libc goes in too
		}
	}
	// The Go probe and heap profile checks' programs.
	for prog, builds := range map[string][]testutil.GoBuild{"goscopes": testutil.GoProbeBuilds, "goalloc": testutil.GoHeapBuilds} {
		for _, b := range builds {
			out := filepath.Join(root, guestWorkloads[1:], b.FileName(prog))
			if err := testutil.CrossBuildGo("testdata/workloads/"+prog, out, a.name, b); err != nil {
				return nil, err
			}
			if b.Cgo {
				bins = append(bins, out)
			}
		}
	}
	python, err := copyPython(root, u)
	if err != nil {
		return nil, fmt.Errorf("copy Debian's CPython: %w", err)
	}
	sid, err := copySidPython(root, a)
	if err != nil {
		return nil, fmt.Errorf("copy Debian sid's CPython %s: %w", guestSidPython, err)
	}
	java, err := copyJava(root, u)
	if err != nil {
		return nil, fmt.Errorf("copy Debian's OpenJDK 17: %w", err)
	}
	node, err := copyNode(root, a)
	if err != nil {
		return nil, fmt.Errorf("copy node %d: %w", guestNodeMajor, err)
	}
	rubyPHP, err := copyRubyAndPHP(root, a)
	if err != nil {
		return nil, err
	}
	if err := copyLibraries(ctx, root, u, slices.Concat(bins, python, java, node, rubyPHP)); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(initScript(a, checksOn(a.name, false), sid)), 0o755); err != nil {
		return nil, err
	}
	p := &payload{arch: a, root: root, initramfs: filepath.Join(dir, "initramfs.gz")}
	if err := writeInitramfs(root, p.initramfs); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	return p, nil
}

// sdtIncludeDir is the host's multiarch include directory, where Debian's
// systemtap-sdt-dev puts <sys/sdt.h>.
func sdtIncludeDir() string {
	if runtime.GOARCH == "arm64" {
		return "/usr/include/aarch64-linux-gnu"
	}
	return "/usr/include/x86_64-linux-gnu"
}

// guestGoLabelBuilds are the builds testutil.GoLabelBuildsHere picks in
// a guest.
func guestGoLabelBuilds() []testutil.GoBuild {
	os.Setenv(testutil.PrebuiltWorkloadsEnv, guestWorkloads)
	defer os.Unsetenv(testutil.PrebuiltWorkloadsEnv)
	return testutil.GoLabelBuildsHere()
}

// guestPython is the CPython of the guest: Debian's, as on the host.
const guestPython = "/usr/bin/python3.11"

// pythonStdlib is the part of Debian's standard library the guest gets:
// what testdata/workloads/pywork.py imports, and much else of the top
// level; not the packages listed in pythonStdlibLeftOut.
const pythonStdlib = "/usr/lib/python3.11"

var pythonStdlibLeftOut = map[string]bool{
	"test": true, "__pycache__": true, "idlelib": true, "tkinter": true, "ensurepip": true, "lib2to3": true,
	"pydoc_data": true, "unittest": true, "distutils": true, "asyncio": true, "xml": true, "email": true,
	"lib-dynload": true, "multiprocessing": true, "concurrent": true,
	"sqlite3": true, "http": true, "urllib": true, "xmlrpc": true, "wsgiref": true, "json": true, "html": true,
	"curses": true, "dbm": true, "venv": true, "turtledemo": true, "ctypes": true, "tomllib": true,
	"zoneinfo": true, "site-packages": true, "dist-packages": true,
}

// copyPython copies Debian's CPython of u, the part of its standard library
// the Python workload needs (7 MB) and the workload into root, and returns
// the interpreter's path here for copyLibraries; nothing when the host has
// no Debian CPython (make test-tools installs it).
func copyPython(root string, u userland) ([]string, error) {
	python := u.path(guestPython)
	if _, err := os.Stat(python); err != nil {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(guestPython)), 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(python, filepath.Join(root, guestPython), 0o755); err != nil {
		return nil, err
	}
	stdlib := u.path(pythonStdlib)
	err := filepath.WalkDir(stdlib, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (pythonStdlibLeftOut[d.Name()] || strings.HasPrefix(d.Name(), "config-")) {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(stdlib, path)
		dst := filepath.Join(root, pythonStdlib, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			return copyFile(path, dst, 0o644)
		}
		return nil // symbolic links: not needed
	})
	if err != nil {
		return nil, err
	}
	if err := copyFile("testdata/workloads/pywork.py", filepath.Join(root, guestWorkloads[1:], "pywork.py"), 0o644); err != nil {
		return nil, err
	}
	return []string{python}, nil
}

// guestSidPython is the newer CPython of the guests: Debian sid's, with
// sid's glibc (testutil.SidPython).
const guestSidPython = "3.14"

// copySidPython copies Debian sid's CPython guestSidPython for a, its
// standard library and sid's glibc into root at the path they have here
// (the interpreter names its glibc by absolute path), and returns the
// interpreter.
func copySidPython(root string, a *arch) (testutil.Interpreter, error) {
	in, dir, err := testutil.SidPythonOf(a.name, guestSidPython)
	if err != nil {
		return in, err
	}
	return in, copyTree(root, dir, nil)
}

// copyLibraries copies the shared libraries (and the dynamic loader) that
// bins load into root, at the same paths, with their separate debug files
// where u has them (libc6-dbg: glibc's internal functions, qsort's and
// start_thread's callers, are named from it). The host's are those ldd
// lists, another architecture's those u.elfLibraries finds.
func copyLibraries(ctx context.Context, root string, u userland, bins []string) error {
	libs := map[string]bool{}
	if u.arch.host() {
		for _, b := range bins {
			out, err := exec.CommandContext(ctx, "ldd", b).Output()
			if err != nil {
				return fmt.Errorf("ldd %s: %w", b, err)
			}
			for _, l := range parseLDD(out) {
				libs[l] = true
			}
		}
	} else {
		found, err := u.elfLibraries(bins)
		if err != nil {
			return err
		}
		for _, l := range found {
			libs[l] = true
		}
	}
	for l := range libs {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(l)), 0o755); err != nil {
			return err
		}
		if err := copyFile(u.resolve(l), filepath.Join(root, l), 0o755); err != nil {
			return err
		}
		debug, err := debugFile(u, u.resolve(l))
		if err != nil || debug == "" {
			continue // a library without a build id or debug file: nothing more to name
		}
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(debug)), 0o755); err != nil {
			return err
		}
		if err := copyFile(u.path(debug), filepath.Join(root, debug), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// debugFile returns the guest path of the separate debug file u has for
// the ELF file at path, by build id, or "" when it has none.
func debugFile(u userland, path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return "", nil
	}
	note, err := s.Data()
	if err != nil || len(note) < 16 {
		return "", err
	}
	id := hex.EncodeToString(note[16:]) // namesz 4, descsz 4, type 4, "GNU\0"
	debug := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(u.path(debug)); err != nil {
		return "", nil
	}
	return debug, nil
}

// parseLDD returns the absolute library paths in ldd output: "name => /path
// (addr)" and the loader's "/path (addr)".
func parseLDD(out []byte) []string {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs
}

// copyFile copies src (following symlinks) to dst.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Markers the guest prints around each check, parsed by parseRun.
const (
	markKernel = "@@matrix kernel "
	markCheck  = "@@matrix check "
	markExit   = "@@matrix exit "
	markDone   = "@@matrix done"
)

// testEnv is the environment of the test binaries, in the guest and on the
// host (with the payload's paths under root).
func testEnv(root string) []string {
	return append([]string{
		testutil.RequireBPFEnv + "=1",
		"BPFPROFILER_COLLECTOR=" + filepath.Join(root, guestCollector),
		testutil.PrebuiltWorkloadsEnv + "=" + filepath.Join(root, guestWorkloads),
	}, extraEnv...)
}

// initScript is the guest's /init: mount what the collector reads, run each
// of checks' tests, print the markers, power off.
func initScript(a *arch, checks []check, sid testutil.Interpreter) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
export PATH=/bin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /sys/fs/cgroup /sys/fs/bpf /sys/kernel/debug
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
ip link set lo up
hostname kernel-matrix
`)
	for _, e := range testEnv("/") {
		fmt.Fprintf(&b, "export %s\n", e)
	}
	// No pyenv in the guest: Debian's CPython and sid's.
	fmt.Fprintf(&b, "export %s=debian-3.11=%s,%s=%s\n", testutil.PythonsEnv, guestPython, sid.Name, sid.Path)
	patience := max(a.patience, 1)
	fmt.Fprintf(&b, "export %s=%d\n", testutil.PatienceEnv, patience)
	fmt.Fprintf(&b, "export %s=1\n", testutil.DisposableKernelEnv)
	fmt.Fprintf(&b, "echo \"%s$(uname -r)\"\n", markKernel)
	for _, c := range checks {
		fmt.Fprintf(&b, "echo '%s%s'\n", markCheck, c.test)
		fmt.Fprintf(&b, "/bin/%s -test.v -test.count=1 -test.timeout=%dm -test.run '^%s$' 2>&1\n", c.binary, c.minutes()*patience, c.test)
		fmt.Fprintf(&b, "echo \"%s%s $?\"\n", markExit, c.test)
	}
	fmt.Fprintf(&b, "echo '%s'\npoweroff -f\n", markDone)
	return b.String()
}
