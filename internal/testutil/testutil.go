// Package testutil holds helpers shared by the BPF integration and end-to-end
// tests: the root/BPF gate and building the workloads of testdata/workloads.
package testutil

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// RequireBPFEnv is the environment variable that turns a BPF test skip into a
// failure; .ci/run sets it.
const RequireBPFEnv = "BPFPROFILER_REQUIRE_BPF"

// PrebuiltWorkloadsEnv names a directory of workloads compiled beforehand
// (CompileC with default flags, named without extension): the kernel matrix
// runs the tests in virtual machines that have no C compiler.
const PrebuiltWorkloadsEnv = "BPFPROFILER_PREBUILT_WORKLOADS"

// DisposableKernelEnv is set to 1 where a test may change the kernel until
// it reboots (raise its lockdown): the kernel matrix's guests.
const DisposableKernelEnv = "BPFPROFILER_DISPOSABLE_KERNEL"

// CFlags are the flags every C workload is compiled with: frame pointers, so
// that frame-pointer unwinding walks the workloads' own functions.
var CFlags = []string{"-O1", "-g", "-fno-omit-frame-pointer", "-pthread"}

// RequireBPF skips the test when it cannot load BPF programs (not root, not
// Linux), unless BPFPROFILER_REQUIRE_BPF=1, where that is a failure.
func RequireBPF(t testing.TB) {
	t.Helper()
	reason := ""
	switch {
	case runtime.GOOS != "linux":
		reason = "BPF needs Linux"
	case os.Geteuid() != 0:
		reason = "BPF tests need root"
	}
	if reason != "" {
		SkipOrFail(t, "%s (%s=1 makes this a failure)", reason, RequireBPFEnv)
	}
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate testutil source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Workload returns the path of testdata/workloads/<name> (a script), or of
// its copy in BPFPROFILER_PREBUILT_WORKLOADS when that is set.
func Workload(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv(PrebuiltWorkloadsEnv); dir != "" {
		return filepath.Join(dir, name) // the kernel matrix's guests have no source tree
	}
	return filepath.Join(RepoRoot(t), "testdata", "workloads", name)
}

// BuildC compiles testdata/workloads/<src> with frame pointers into a
// temporary directory and returns the binary's path. With
// BPFPROFILER_PREBUILT_WORKLOADS set (and no extra flags) it returns the
// prebuilt binary instead.
func BuildC(t testing.TB, src string, extraFlags ...string) string {
	t.Helper()
	if dir := os.Getenv(PrebuiltWorkloadsEnv); dir != "" && len(extraFlags) == 0 {
		bin := filepath.Join(dir, trimExt(src))
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("prebuilt workload: %v", err)
		}
		return bin
	}
	out := filepath.Join(t.TempDir(), trimExt(src))
	if err := CompileC(Workload(t, src), out, extraFlags...); err != nil {
		t.Fatal(err)
	}
	return out
}

// CompileC compiles the C file src into out with CFlags, the flags of the
// file's own "// cflags:" line (see SourceFlags) and extraFlags.
func CompileC(src, out string, extraFlags ...string) error {
	own, err := SourceFlags(src)
	if err != nil {
		return err
	}
	args := append(append(append(slices.Clone(CFlags), "-o", out, src), own...), extraFlags...)
	compiler := "cc"
	if strings.HasSuffix(src, ".cpp") {
		compiler = "c++"
	}
	if b, err := RunWithin(exec.Command(compiler, args...), BuildTimeout); err != nil {
		return fmt.Errorf("cc %v: %w\n%s", args, err, b)
	}
	return nil
}

// BuildGo builds the Go program in testdata/workloads/<dir> and returns the
// binary's path.
func BuildGo(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(dir))
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = Workload(t, dir)
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "GOFLAGS=")
	run(t, cmd)
	return out
}

// GoBuild says how BuildGoWith builds a Go workload: with which Go release
// (GOTOOLCHAIN: the go command fetches it from the module proxy), with
// cgo (a dynamic executable linked by the C toolchain) or without (static),
// and with which -ldflags.
type GoBuild struct {
	Toolchain string // e.g. go1.23.12; "" the go command's own
	Cgo       bool
	LDFlags   string // e.g. "-s -w": no symbol table, no DWARF
	PIE       bool   // -buildmode=pie: loaded at a bias
}

// GoLabelBuilds are the builds of the golabels workload the Go labels
// tests profile: the two newest Go releases the module proxy serves and
// one whose labels are a map (before go1.24), each static and stripped (as
// images ship them) and with cgo (dynamic, linked by the C toolchain);
// go1.26.8's static build is position independent (as distributions build
// theirs).
var GoLabelBuilds = []GoBuild{
	{Toolchain: "go1.27.3", LDFlags: "-s -w"},
	{Toolchain: "go1.27.3", Cgo: true},
	{Toolchain: "go1.26.8", LDFlags: "-s -w", PIE: true},
	{Toolchain: "go1.26.8", Cgo: true},
	{Toolchain: "go1.23.12", LDFlags: "-s -w"},
	{Toolchain: "go1.23.12", Cgo: true},
}

// GoLabelBuildsHere are the GoLabelBuilds the tests run here: in the
// kernel matrix's guests (one emulated CPU shared by every workload),
// two, prebuilt (buildPayload builds these): the newest release with cgo
// (g in the executable's TLS block) and the one with map labels static and
// stripped (g at the thread pointer's -8 on amd64). Four took 2m53s to
// 3m40s of the check's 220 s for their samples; the host runs all six.
func GoLabelBuildsHere() []GoBuild {
	if os.Getenv(PrebuiltWorkloadsEnv) == "" {
		return GoLabelBuilds
	}
	return []GoBuild{GoLabelBuilds[1], GoLabelBuilds[4]}
}

// GoProbeBuilds are the builds of the goscopes workload the Go probe
// tests time: the oldest Go release the probes support static and
// stripped (its functions found in .gopclntab), and the newest with cgo.
var GoProbeBuilds = []GoBuild{
	{Toolchain: "go1.21.13", LDFlags: "-s -w"},
	{Toolchain: "go1.27.3", Cgo: true},
}

// GoHeapBuilds are the builds of the goalloc workload the heap profile
// tests profile: the oldest Go release whose allocation hooks are known
// static, and the newest with cgo, both with a symbol table (each
// process's runtime.MemProfileRate is read at its symbol: the tests set
// it; a stripped build's is taken to be the default).
var GoHeapBuilds = []GoBuild{
	{Toolchain: "go1.21.13"},
	{Toolchain: "go1.27.3", Cgo: true},
}

// Name says which build b is: "go1.23.12 cgo", "go1.27.3 static".
func (b GoBuild) Name() string {
	name := b.Toolchain + " static"
	if b.Cgo {
		name = b.Toolchain + " cgo"
	}
	if b.PIE {
		name += " pie"
	}
	return name
}

// GoToolchainsEnv replaces pinned Go toolchains for one run:
// "go1.27.3=go1.27.4,go1.23.12=go1.23.13" (make check-runtimes sets it to
// the newest patch of each pinned minor).
const GoToolchainsEnv = "BPFPROFILER_GO_TOOLCHAINS"

// GoToolchain is the toolchain the tests build with where pinned says:
// pinned itself unless GoToolchainsEnv replaces it.
func GoToolchain(pinned string) string {
	for _, kv := range strings.Split(os.Getenv(GoToolchainsEnv), ",") {
		if from, to, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && from == pinned && to != "" {
			return to
		}
	}
	return pinned
}

// FileName is the name of dir's binary built as b among prebuilt workloads.
func (b GoBuild) FileName(dir string) string {
	return filepath.Base(dir) + "-" + strings.ReplaceAll(b.Name(), " ", "-")
}

// BuildGoWith builds the Go program in testdata/workloads/<dir> as b says,
// as a module of its own (go 1.21) so that GOTOOLCHAIN applies, and
// returns the binary's path; with BPFPROFILER_PREBUILT_WORKLOADS set, the
// prebuilt one (b.FileName).
func BuildGoWith(t testing.TB, dir string, b GoBuild) string {
	t.Helper()
	if pre := os.Getenv(PrebuiltWorkloadsEnv); pre != "" {
		return filepath.Join(pre, b.FileName(dir))
	}
	out := filepath.Join(t.TempDir(), filepath.Base(dir))
	b.Toolchain = GoToolchain(b.Toolchain)
	if err := CrossBuildGo(Workload(t, dir), out, runtime.GOARCH, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// CrossBuildGo builds the Go program in directory src for arch as b says
// into out (the kernel matrix builds its guests' workloads with it).
func CrossBuildGo(src, out, arch string, b GoBuild) error {
	work, err := os.MkdirTemp("", "gobuild")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(work, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte("module "+filepath.Base(src)+"\n\ngo 1.21\n"), 0o644); err != nil {
		return err
	}
	args := []string{"build", "-ldflags=" + b.LDFlags, "-o", out}
	if b.PIE {
		args = append(args, "-buildmode=pie")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = work
	cgo, cc := "0", "gcc"
	if b.Cgo {
		cgo = "1"
	}
	if arch == "arm64" && runtime.GOARCH != "arm64" {
		cc = "aarch64-linux-gnu-gcc"
	}
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=on", "GOOS=linux", "GOARCH="+arch, "CC="+cc,
		"CGO_ENABLED="+cgo, "GOTOOLCHAIN="+cmp.Or(b.Toolchain, "local"))
	if out, err := RunWithin(cmd, BuildTimeout); err != nil {
		return fmt.Errorf("go build %s (%s): %w\n%s", src, b.Name(), err, out)
	}
	return nil
}

// BuildTimeout bounds one build of a workload: a compiler, or go build
// fetching a toolchain from the module proxy.
const BuildTimeout = 10 * time.Minute

func run(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if out, err := RunWithin(cmd, BuildTimeout); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
}

func trimExt(name string) string {
	return name[:len(name)-len(filepath.Ext(name))]
}

// SkipOrFail skips a BPF test that lacks something it needs (a second CPU,
// node, unshare), unless BPFPROFILER_REQUIRE_BPF=1, where that is a failure:
// CI has all of it, so a skip there would hide a test that never ran.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireBPFEnv) == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// SourceFlags returns the flags a workload asks for in a line of its own
// "// cflags: -O2 -fomit-frame-pointer" (before its first #include), which
// override CFlags: the workload is built the same way by every test and by
// the kernel matrix.
func SourceFlags(src string) ([]string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#include") {
			break
		}
		if rest, ok := strings.CutPrefix(line, "// cflags:"); ok {
			return strings.Fields(rest), nil
		}
	}
	return nil, nil
}

// BuildRust compiles the single-file Rust program testdata/workloads/<src>
// as a release build (optimized, no frame pointers) and returns the
// binary's path. rustc is taken from PATH, else from ~/.cargo/bin (rustup);
// without it the test is skipped (failed with BPFPROFILER_REQUIRE_BPF=1).
func BuildRust(t testing.TB, src string) string {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		home, _ := os.UserHomeDir()
		rustc = filepath.Join(home, ".cargo", "bin", "rustc")
		if _, err := os.Stat(rustc); err != nil {
			SkipOrFail(t, "no rustc in PATH or ~/.cargo/bin")
		}
	}
	out := filepath.Join(t.TempDir(), trimExt(src))
	cmd := exec.Command(rustc, "-C", "opt-level=3", "-C", "force-frame-pointers=no", "-o", out, Workload(t, src))
	cmd.Dir = t.TempDir()
	run(t, cmd)
	return out
}
