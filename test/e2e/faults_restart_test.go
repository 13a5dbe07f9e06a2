//go:build linux

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// restartConfig is CPU and off-CPU profiling with a report every second and
// three probes on restartprobe's functions, each record printed in detail.
func restartConfig(workload string) string {
	file := regexp.QuoteMeta(workload)
	return fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 1s
    cpu: {enabled: true}
    off_cpu: {enabled: true}
    probes:
      - {id: fault.outer, file_match: '^%[1]s$', symbol: fault_outer}
      - {id: fault.sleep, file_match: '^%[1]s$', symbol: fault_sleep}
      - {id: fault.spin, file_match: '^%[1]s$', symbol: fault_spin}
exporters:
  debug: {verbosity: basic}
  debug/records: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
    logs: {receivers: [bpfprofiler], exporters: [debug/records]}
`, file)
}

// restartFixture is what every start of the restart scenario checks
// against: the node before any collector ran and the probed process.
type restartFixture struct {
	bin, config string
	work        *testutil.Child
	status      string            // the file work writes its calls to
	code        map[string]uint64 // probed function -> its address in work
	baseCode    map[string]byte   // its first byte with no probe attached
	base        kernelObjects
	basePerf    int
	ours        map[string]bool // names of the programs and maps a collector creates
}

// A collector killed at any moment (while loading, attaching, reporting)
// leaves nothing behind: its programs, maps and links, its perf events and
// its uprobes' breakpoints in a probed process are gone; the next collector
// starts in its normal time and its probes fire in the process that kept
// running, which computed every call right.
func TestFaultRestartHygiene(t *testing.T) {
	bin, full := faultLength(t)
	cycles := 10
	if full {
		cycles = 50
	}
	f := newRestartFixture(t, bin)

	// A clean start and stop: the normal start time, what a collector
	// creates, and that SIGTERM leaves nothing.
	first := time.Now()
	out, _, stop := f.launch(t)
	f.awaitAttached(t, out, time.Minute)
	normal := time.Since(first)
	created, err := readKernelObjects()
	require.NoError(t, err)
	created = created.since(f.base)
	for _, n := range created.progs {
		f.ours[n] = true
	}
	for _, n := range created.maps {
		f.ours[n] = true
	}
	require.NotEmpty(t, created.progs, "the collector created no BPF programs")
	f.requireProbesFire(t, out, 0)
	faultFigure(t, "one collector: %d programs, %d maps (%.1f MiB charged), %d links, %d perf event files; ready and attached in %v",
		len(created.progs), len(created.maps), float64(created.bytes())/(1<<20), len(created.links),
		perfEventFiles()-f.basePerf, normal.Round(10*time.Millisecond))
	require.NoError(t, stop())
	f.requireClean(t, "after SIGTERM")

	// A start within 2x the first one's time, and 10 s more for a busy machine.
	limit := 2*normal + testutil.Patient(10*time.Second)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d, start limit %v", seed, limit)
	var slowest time.Duration
	for i := range cycles {
		// Killed while starting, loading or attaching.
		_, cmd, stop := f.launch(t)
		time.Sleep(time.Duration(rng.Int64N(int64(normal + time.Second))))
		require.NoError(t, cmd.Process.Kill())
		_ = stop()
		f.requireClean(t, fmt.Sprintf("cycle %d: after SIGKILL while starting", i))

		// The next start is on time and its probes fire; killed once it
		// reports (the report interval is 1 s).
		began := time.Now()
		out, cmd, stop := f.launch(t)
		f.awaitAttached(t, out, limit)
		slowest = max(slowest, time.Since(began))
		f.requireProbesFire(t, out, i)
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
		require.NoError(t, cmd.Process.Kill())
		_ = stop()
		f.requireClean(t, fmt.Sprintf("cycle %d: after SIGKILL while running", i))
	}
	calls, wrong := f.workCalls(t)
	require.Zero(t, wrong, "calls of the probed process that returned a wrong result")
	faultFigure(t, "%d SIGKILLs (seed %d): nothing left after any; slowest next start %v (first %v); probed process alive, %d calls, %d wrong",
		2*cycles, seed, slowest.Round(10*time.Millisecond), normal.Round(10*time.Millisecond), calls, wrong)
}

func newRestartFixture(t *testing.T, bin string) *restartFixture {
	t.Helper()
	workload := testutil.BuildC(t, "restartprobe.c")
	f := &restartFixture{bin: bin, config: restartConfig(workload), code: map[string]uint64{},
		baseCode: map[string]byte{}, ours: map[string]bool{}}
	f.status = filepath.Join(t.TempDir(), "status")
	f.work = testutil.StartWorkloadChild(t, workload, f.status)
	lines := f.work.Until(t, testutil.Patient(30*time.Second), func(l string) bool { return strings.HasPrefix(l, "fault_outer ") })
	for _, l := range lines {
		var name string
		var addr uint64
		if _, err := fmt.Sscanf(l, "%s 0x%x", &name, &addr); err == nil {
			f.code[name] = addr
		}
	}
	require.Len(t, f.code, 3, "restartprobe's addresses: %q", lines)
	f.baseCode = f.codeBytes(t)
	f.basePerf = perfEventFiles()
	var err error
	f.base, err = readKernelObjects()
	require.NoError(t, err)
	return f
}

// launch starts a collector; stop reaps it (SIGTERM, or nothing more after
// a SIGKILL).
func (f *restartFixture) launch(t *testing.T) (*syncBuffer, *exec.Cmd, func() error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(path, []byte(f.config), 0o600))
	cmd := exec.Command(f.bin, "--config", path, "--feature-gates=service.profilesSupport")
	out, stop := runStoppableCollector(t, cmd)
	return out, cmd, stop
}

// awaitAttached waits until the collector is ready with its probes attached.
func (f *restartFixture) awaitAttached(t *testing.T, out *syncBuffer, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := out.String()
		return strings.Contains(s, "Everything is ready") && strings.Contains(s, "probes attached")
	}, within, 20*time.Millisecond, "the collector was not ready with its probes attached within %v:\n%s", within, out)
}

// requireProbesFire waits for a record of each probe and checks that the
// probed functions carry a breakpoint while attached.
func (f *restartFixture) requireProbesFire(t *testing.T, out *syncBuffer, cycle int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := out.String()
		return strings.Contains(s, "Body: Str(fault.outer)") && strings.Contains(s, "Body: Str(fault.sleep)") &&
			strings.Contains(s, "Body: Str(fault.spin)")
	}, testutil.Patient(15*time.Second), 50*time.Millisecond, "cycle %d: no record of every probe", cycle)
	attached := f.codeBytes(t)
	for name, b := range f.baseCode {
		require.NotEqual(t, b, attached[name], "cycle %d: %s's first byte is unchanged while its probe is attached", cycle, name)
	}
}

// requireClean waits until nothing a collector created is left.
func (f *restartFixture) requireClean(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(testutil.Patient(15 * time.Second))
	for {
		objs, err := readKernelObjects()
		require.NoError(t, err)
		left := f.ourOnly(objs.since(f.base))
		perf := perfEventFiles()
		code := f.codeBytes(t)
		restored := true
		for name, b := range f.baseCode {
			restored = restored && code[name] == b
		}
		if left.empty() && perf <= f.basePerf && restored {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: left behind: %v; perf event files %d (before %d); probed code restored %v",
				when, left, perf, f.basePerf, restored)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ourOnly keeps the objects named as a collector's: the node's other
// programs (systemd's cgroup programs) may come and go meanwhile.
func (f *restartFixture) ourOnly(o kernelObjects) kernelObjects {
	for id, n := range o.progs {
		if !f.ours[n] && len(f.ours) > 0 {
			delete(o.progs, id)
		}
	}
	for id, n := range o.maps {
		if !f.ours[n] && len(f.ours) > 0 {
			delete(o.maps, id)
			delete(o.mapBytes, id)
		}
	}
	return o
}

// codeBytes reads the first byte of each probed function in the workload.
func (f *restartFixture) codeBytes(t *testing.T) map[string]byte {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", f.work.Pid()))
	require.NoError(t, err)
	defer mem.Close()
	got := map[string]byte{}
	for name, addr := range f.code {
		b := make([]byte, 1)
		_, err := mem.ReadAt(b, int64(addr))
		require.NoError(t, err, "read %s at %#x", name, addr)
		got[name] = b[0]
	}
	return got
}

// workCalls returns the probed process's last count of calls and of wrong
// results; it fails the test if the process exited.
func (f *restartFixture) workCalls(t *testing.T) (calls, wrong uint64) {
	t.Helper()
	select {
	case <-f.work.Exited():
		t.Fatalf("the probed process exited")
	default:
	}
	var fields []string
	require.Eventually(t, func() bool { // rewritten every second: read again if caught empty
		b, err := os.ReadFile(f.status)
		fields = strings.Fields(string(b))
		return err == nil && len(fields) == 4
	}, testutil.Patient(5*time.Second), 50*time.Millisecond, "restartprobe's status file")
	calls, err := strconv.ParseUint(fields[1], 10, 64)
	require.NoError(t, err)
	wrong, err = strconv.ParseUint(fields[3], 10, 64)
	require.NoError(t, err)
	return calls, wrong
}
