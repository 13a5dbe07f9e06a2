//go:build linux

package sampler

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// openSampler opens a sampler (root is required, see testutil.RequireBPF).
func openSampler(t *testing.T, opts Options) *Sampler {
	t.Helper()
	testutil.RequireBPF(t)
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// startWorkload builds testdata/workloads/<name>.c, runs it for the given
// seconds and returns its pid.
func startWorkload(t *testing.T, name string, seconds float64) uint32 {
	t.Helper()
	cmd := testutil.StartWorkload(t, testutil.BuildC(t, name+".c"), strconv.FormatFloat(seconds, 'f', -1, 64))
	return uint32(cmd.Process.Pid)
}

// sampleFor drains once after d and returns the samples and the elapsed time.
func sampleFor(t *testing.T, s *Sampler, d time.Duration) ([]capture.RawStack, capture.Stats, time.Duration) {
	t.Helper()
	start := time.Now()
	if _, _, err := s.Drain(); err != nil { // start from an empty window
		t.Fatal(err)
	}
	time.Sleep(d)
	samples, st, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	return samples, st, time.Since(start)
}

func TestSampleRateTooHigh(t *testing.T) {
	b, err := os.ReadFile(sampleRatePath)
	if err != nil {
		testutil.SkipOrFail(t, "no %s: %v", sampleRatePath, err)
	}
	limit, err := parseSampleRate(b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{SamplesPerSecond: limit + 1})
	if err == nil {
		t.Fatal("Open above the kernel limit succeeded")
	}
	for _, want := range []string{strconv.FormatUint(limit+1, 10), strconv.FormatUint(limit, 10), "kernel.perf_event_max_sample_rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestOpenCloseTwice(t *testing.T) {
	for i := range 2 {
		s := openSampler(t, Options{SamplesPerSecond: 49})
		if _, _, err := s.Drain(); err != nil {
			t.Fatalf("round %d: Drain: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: second Close: %v", i, err)
		}
		if _, _, err := s.Drain(); err == nil {
			t.Fatalf("round %d: Drain after Close succeeded", i)
		}
	}
}

func TestCPUBurn(t *testing.T) {
	testutil.RequireBPF(t)
	const hz = 99
	pid := startWorkload(t, "cpuburn", 60)
	s := openSampler(t, Options{SamplesPerSecond: hz, TargetPIDs: []uint32{pid}})
	cpuBefore := testutil.ProcessCPU(t, int(pid))
	samples, st, elapsed := sampleFor(t, s, 3*time.Second)
	cpuUsed := testutil.ProcessCPU(t, int(pid)) - cpuBefore

	var total uint64
	tids := map[uint32]string{}
	stacks := 0
	for _, smp := range samples {
		if smp.PID != pid {
			t.Fatalf("sample of pid %d, only %d is targeted", smp.PID, pid)
		}
		total += smp.Value
		tids[smp.TID] = smp.Comm
		if len(smp.Addresses(capture.UserFrame)) > 1 {
			stacks += int(smp.Value)
		}
	}
	// Two busy threads get up to one CPU each, less on a loaded machine, so
	// the expectation follows the CPU time the workload really got.
	threads := min(2, runtime.NumCPU())
	ideal := float64(threads) * hz * elapsed.Seconds()
	expected := hz * cpuUsed.Seconds()
	t.Logf("pid %d: %d samples in %v; %v CPU time -> expected ~%.0f (ideal %.0f); threads %v; stats %+v",
		pid, total, elapsed, cpuUsed, expected, ideal, tids, st)
	if total < 20 || float64(total) < 0.5*expected {
		t.Errorf("got %d samples, want at least half of %.0f", total, expected)
	}
	if st.Recorded != total {
		t.Errorf("stats.Recorded %d != drained samples %d", st.Recorded, total)
	}
	names := map[string]bool{}
	for tid, comm := range tids {
		if tid != pid {
			names[comm] = true
		}
	}
	if !names["burner-1"] || !names["burner-2"] {
		t.Errorf("want samples of both threads burner-1 and burner-2, got %v", tids)
	}
	if float64(stacks) < 0.9*float64(total) {
		t.Errorf("only %d of %d samples have a user stack of more than one frame", stacks, total)
	}
	checkBurnSymbols(t, pid, samples)
}

// checkBurnSymbols resolves the innermost frames with the project's
// symbolizer and checks that burn_hot and burn_cold dominate, about 3:1.
func checkBurnSymbols(t *testing.T, pid uint32, samples []capture.RawStack) {
	t.Helper()
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	var hot, cold, total uint64
	for _, smp := range samples {
		total += smp.Value
		// The leaf may be in libc's clock_gettime, which keeps no frame
		// pointer, so look at the first few frames.
		frames := sym.User(pid, smp.Addresses(capture.UserFrame)[:min(3, len(smp.Addresses(capture.UserFrame)))])
		for _, f := range frames {
			if f.Function == "burn_hot" {
				hot += smp.Value
				break
			}
			if f.Function == "burn_cold" {
				cold += smp.Value
				break
			}
		}
	}
	t.Logf("burn_hot %d, burn_cold %d of %d samples", hot, cold, total)
	if float64(hot+cold) < 0.8*float64(total) {
		t.Errorf("burn_hot+burn_cold = %d of %d samples, want >= 80%%", hot+cold, total)
	}
	if share := float64(hot) / float64(hot+cold); share < 0.6 || share > 0.9 {
		t.Errorf("burn_hot share %.2f, want about 0.75", share)
	}
}

func TestKernelStacks(t *testing.T) {
	testutil.RequireBPF(t)
	pid := startWorkload(t, "syscalls", 60)
	s := openSampler(t, Options{SamplesPerSecond: 99, TargetPIDs: []uint32{pid}})

	// Collect at least 100 samples; a loaded machine may need longer.
	var samples []capture.RawStack
	var st capture.Stats
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && pidCounts(samples)[pid] < 100; {
		more, mst, _ := sampleFor(t, s, time.Second)
		samples = append(samples, more...)
		st = st.Add(mst)
	}

	var total, withKernel uint64
	for _, smp := range samples {
		total += smp.Value
		if len(smp.Addresses(capture.KernelFrame)) == 0 {
			continue
		}
		withKernel += smp.Value
		if runtime.GOARCH == "amd64" && smp.Addresses(capture.KernelFrame)[0] < 0xffff800000000000 {
			t.Errorf("kernel frame %#x is not a kernel address", smp.Addresses(capture.KernelFrame)[0])
		}
	}
	t.Logf("%d of %d samples with a kernel stack, stats %+v", withKernel, total, st)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	if float64(withKernel) < 0.5*float64(total) {
		t.Errorf("%d of %d samples have a kernel stack, want most", withKernel, total)
	}
}

func TestHostWideAndRetarget(t *testing.T) {
	testutil.RequireBPF(t)
	burn := startWorkload(t, "cpuburn", 60)
	sys := startWorkload(t, "syscalls", 60)
	s := openSampler(t, Options{SamplesPerSecond: 99})

	samples, _, _ := sampleFor(t, s, time.Second)
	pids := pidCounts(samples)
	t.Logf("host-wide: %d pids", len(pids))
	if len(pids) < 2 || pids[burn] == 0 || pids[sys] == 0 {
		t.Errorf("host-wide sampling saw pids %v, want cpuburn %d and syscalls %d among them", pids, burn, sys)
	}
	for _, smp := range samples {
		if smp.PID == 0 {
			t.Fatal("idle (pid 0) was sampled")
		}
	}

	if err := s.SetTargets([]uint32{sys}); err != nil {
		t.Fatal(err)
	}
	samples, _, _ = sampleFor(t, s, time.Second)
	pids = pidCounts(samples)
	if len(pids) != 1 || pids[sys] == 0 {
		t.Errorf("targeting %d, saw pids %v", sys, pids)
	}

	if err := s.SetTargets(nil); err != nil {
		t.Fatal(err)
	}
	samples, _, _ = sampleFor(t, s, time.Second)
	if pids = pidCounts(samples); pids[burn] == 0 || pids[sys] == 0 {
		t.Errorf("after clearing targets saw pids %v, want %d and %d", pids, burn, sys)
	}
}

func pidCounts(samples []capture.RawStack) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, s := range samples {
		out[s.PID] += s.Value
	}
	return out
}

// TestDrainLosesNothing drains repeatedly while a target runs; once it has
// exited every recorded sample must have been drained exactly once.
func TestDrainLosesNothing(t *testing.T) {
	testutil.RequireBPF(t)
	// The burn starts once the sampler is open (Open took 2 s here, longer
	// than the burn): the shell waits for a line, then becomes cpuburn.
	cmd := exec.Command("sh", "-c", `read line && exec "$0" 1.5`, testutil.BuildC(t, "cpuburn.c"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pid := uint32(testutil.StartChild(t, cmd).Pid())
	s := openSampler(t, Options{SamplesPerSecond: 999, TargetPIDs: []uint32{pid}})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}

	var drained, recorded uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		exited := unix.Kill(int(pid), 0) != nil || isZombie(pid)
		samples, st, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range samples {
			drained += smp.Value
		}
		var n uint64
		for _, smp := range samples {
			n += smp.Value
		}
		if n != st.Recorded {
			t.Errorf("one drain returned %d samples, its stats say %d recorded", n, st.Recorded)
		}
		recorded += st.Recorded
		if exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workload did not exit")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("drained %d, recorded %d", drained, recorded)
	if drained == 0 || drained != recorded {
		t.Errorf("drained %d samples, BPF recorded %d", drained, recorded)
	}
}

func isZombie(pid uint32) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}
