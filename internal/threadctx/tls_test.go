package threadctx

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// spansBuild is one way an SDK's TLS variable ends up in a process.
type spansBuild struct {
	name    string
	program string // the executable
	library string // the SDK library, "" when the executable defines the variable
}

// buildSpans builds testdata/workloads/spans.c as an executable defining
// otel_thread_ctx_v1 (local-exec) and as a library with TLS descriptors and
// with the legacy general dynamic model, each with a program linking it.
func buildSpans(t *testing.T, cc string) []spansBuild {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		testutil.SkipOrFail(t, "no %s: %v", cc, err)
	}
	src, dir := testutil.Workload(t, "spans.c"), t.TempDir()
	run := func(args ...string) {
		t.Helper()
		if out, err := testutil.RunWithin(exec.Command(cc, args...), testutil.Patient(testutil.BuildTimeout)); err != nil {
			t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
		}
	}
	exe := filepath.Join(dir, "spans")
	run("-O1", "-Wl,--export-dynamic-symbol="+Symbol, "-o", exe, src)
	builds := []spansBuild{{name: "executable (local-exec)", program: exe}}
	dialects := []string{"gnu2", "gnu"} // TLS descriptors, general dynamic
	if strings.Contains(cc, "aarch64") {
		dialects = []string{"desc", "trad"}
	}
	for i, dialect := range dialects {
		lib := filepath.Join(dir, dialect, "libspans.so")
		require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
		run("-O1", "-shared", "-fPIC", "-mtls-dialect="+dialect, "-DSPANS_SDK_ONLY", "-o", lib, src)
		prog := filepath.Join(dir, dialect, "spans")
		run("-O1", "-DSPANS_PROGRAM_ONLY", "-o", prog, src, "-L"+filepath.Dir(lib), "-lspans", "-Wl,-rpath,"+filepath.Dir(lib))
		name := []string{"library (TLS descriptor)", "library (general dynamic)"}[i]
		builds = append(builds, spansBuild{name: name, program: prog, library: lib})
	}
	return builds
}

// TestResolveInProcess resolves the variable in running processes of each
// build and checks it against the address the process prints for its main
// thread, reading the thread's vector as the samplers do.
func TestResolveInProcess(t *testing.T) {
	for _, b := range buildSpans(t, "cc") {
		t.Run(b.name, func(t *testing.T) {
			c := testutil.StartChild(t, exec.Command(b.program, "30", "where"))
			line := c.Line(t, testutil.Patient(time.Minute))
			var pid int
			var tp, want uint64
			_, err := fmt.Sscanf(strings.TrimSpace(line), "%d tp=%v var=%v", &pid, &tp, &want)
			require.NoError(t, err, "line %q", line)

			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()
			file := b.program
			if b.library != "" {
				file = b.library
			}
			f, err := elf.Open(file)
			require.NoError(t, err)
			defer f.Close()
			m, err := Prepare(f)
			require.NoError(t, err)
			assert.Equal(t, b.library == "", m.executable, "told an executable from a library")
			loc, err := m.Locate(mem, testutil.LoadBias(t, pid, file))
			require.NoError(t, err)
			got, err := loc.Address(mem, tp, f.Machine)
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%#x", want), fmt.Sprintf("%#x", got), "location %+v", loc)
			t.Logf("%+v", loc)
		})
	}
}

// TestResolveExecutableARM64 checks the arm64 layout (TLS variant I) against
// what the executable prints under qemu-aarch64: the variable's offset from
// its thread pointer.
func TestResolveExecutableARM64(t *testing.T) {
	if _, err := exec.LookPath("qemu-aarch64-static"); err != nil {
		testutil.SkipOrFail(t, "no qemu-aarch64-static: %v", err)
	}
	builds := buildSpans(t, "aarch64-linux-gnu-gcc")
	// Stdout only, as Output read it: qemu's warnings go to stderr.
	c := testutil.StartChild(t, exec.Command("qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", builds[0].program, "0", "where"))
	out := c.Line(t, testutil.Patient(time.Minute))
	require.NoError(t, c.Wait(t, testutil.Patient(time.Minute)))
	var pid int
	var tp, addr uint64
	_, err := fmt.Sscanf(strings.TrimSpace(out), "%d tp=%v var=%v", &pid, &tp, &addr)
	require.NoError(t, err, "output %q", out)
	f, err := elf.Open(builds[0].program)
	require.NoError(t, err)
	defer f.Close()
	loc, err := ResolveExecutable(f)
	require.NoError(t, err)
	assert.Equal(t, Location{Offset: int64(addr - tp)}, loc)
}
