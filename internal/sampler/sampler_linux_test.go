//go:build linux

package sampler

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const workloadDir = "../../testdata/workloads"

// skipOrFail skips, unless BPFPROFILER_REQUIRE_BPF=1 makes the missing
// capability a failure (CI runs these tests as root).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("BPFPROFILER_REQUIRE_BPF") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// requireRoot skips (or fails, see skipOrFail) unless running as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "BPF sampling needs root")
	}
}

// openSampler opens a sampler, skipping when BPF is unavailable.
func openSampler(t *testing.T, opts Options) *Sampler {
	t.Helper()
	requireRoot(t)
	s, err := Open(opts)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		skipOrFail(t, "BPF unavailable: %v", err)
	}
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// buildC compiles a workload with frame pointers into a temporary directory.
func buildC(t *testing.T, name string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		skipOrFail(t, "no C compiler: %v", err)
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(cc, "-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", out, filepath.Join(workloadDir, name+".c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	return out
}

// startWorkload runs bin for the given seconds and returns its pid (the first line it prints).
func startWorkload(t *testing.T, bin string, seconds float64) uint32 {
	t.Helper()
	cmd := exec.Command(bin, strconv.FormatFloat(seconds, 'f', -1, 64))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read pid of %s: %v", bin, err)
	}
	pid, err := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if err != nil || int(pid) != cmd.Process.Pid {
		t.Fatalf("%s printed pid %q, started %d", bin, line, cmd.Process.Pid)
	}
	return uint32(pid)
}

// sampleFor drains once after d and returns the samples and the elapsed time.
func sampleFor(t *testing.T, s *Sampler, d time.Duration) ([]RawSample, Stats, time.Duration) {
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
		t.Skipf("no %s: %v", sampleRatePath, err)
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
	requireRoot(t)
	const hz = 99
	bin := buildC(t, "cpuburn")
	pid := startWorkload(t, bin, 60)
	s := openSampler(t, Options{SamplesPerSecond: hz, TargetPIDs: []uint32{pid}})
	cpuBefore := processCPU(t, pid)
	samples, st, elapsed := sampleFor(t, s, 3*time.Second)
	cpuUsed := processCPU(t, pid) - cpuBefore

	var total uint64
	tids := map[uint32]string{}
	stacks := 0
	for _, smp := range samples {
		if smp.PID != pid {
			t.Fatalf("sample of pid %d, only %d is targeted", smp.PID, pid)
		}
		total += smp.Value
		tids[smp.TID] = smp.Comm
		if len(smp.UserStack) > 1 {
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
	checkBurnSymbols(t, bin, pid, samples)
}

// checkBurnSymbols resolves the innermost frames with the binary's symbol
// table and checks that burn_hot and burn_cold dominate, about 3:1.
func checkBurnSymbols(t *testing.T, bin string, pid uint32, samples []RawSample) {
	t.Helper()
	res, err := newResolver(bin, pid)
	if err != nil {
		t.Fatalf("symbol resolver: %v", err)
	}
	var hot, cold, total uint64
	for _, smp := range samples {
		total += smp.Value
		// The leaf may be in libc's clock_gettime, which keeps no frame
		// pointer, so look at the first few frames.
		for _, pc := range smp.UserStack[:min(3, len(smp.UserStack))] {
			name := res.symbol(pc)
			if name == "burn_hot" {
				hot += smp.Value
				break
			}
			if name == "burn_cold" {
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

type resolver struct {
	syms  []elf.Symbol
	progs []*elf.Prog
	maps  []mapping
}

type mapping struct{ start, end, offset uint64 }

func newResolver(bin string, pid uint32) (*resolver, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	r := &resolver{syms: syms}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			r.progs = append(r.progs, p)
		}
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(maps)) {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[5] != bin {
			continue
		}
		var m mapping
		lo, hi, _ := strings.Cut(fields[0], "-")
		m.start, _ = strconv.ParseUint(lo, 16, 64)
		m.end, _ = strconv.ParseUint(hi, 16, 64)
		m.offset, _ = strconv.ParseUint(fields[2], 16, 64)
		r.maps = append(r.maps, m)
	}
	if len(r.maps) == 0 {
		return nil, fmt.Errorf("%s not mapped in pid %d", bin, pid)
	}
	return r, nil
}

// symbol maps a runtime address to the function containing it, or "".
func (r *resolver) symbol(pc uint64) string {
	for _, m := range r.maps {
		if pc < m.start || pc >= m.end {
			continue
		}
		off := pc - m.start + m.offset
		for _, p := range r.progs {
			if off < p.Off || off >= p.Off+p.Filesz {
				continue
			}
			vaddr := off - p.Off + p.Vaddr
			for _, s := range r.syms {
				if elf.ST_TYPE(s.Info) == elf.STT_FUNC && vaddr >= s.Value && vaddr < s.Value+s.Size {
					return s.Name
				}
			}
		}
	}
	return ""
}

func TestKernelStacks(t *testing.T) {
	requireRoot(t)
	bin := buildC(t, "syscalls")
	pid := startWorkload(t, bin, 60)
	s := openSampler(t, Options{SamplesPerSecond: 99, TargetPIDs: []uint32{pid}})

	// Collect at least 100 samples; a loaded machine may need longer.
	var samples []RawSample
	var st Stats
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && pidCounts(samples)[pid] < 100; {
		more, mst, _ := sampleFor(t, s, time.Second)
		samples = append(samples, more...)
		st.Recorded += mst.Recorded
		st.KernelStackErrors += mst.KernelStackErrors
	}

	var total, withKernel uint64
	for _, smp := range samples {
		total += smp.Value
		if len(smp.KernelStack) == 0 {
			continue
		}
		withKernel += smp.Value
		if runtime.GOARCH == "amd64" && smp.KernelStack[0] < 0xffff800000000000 {
			t.Errorf("kernel frame %#x is not a kernel address", smp.KernelStack[0])
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
	requireRoot(t)
	burn := startWorkload(t, buildC(t, "cpuburn"), 60)
	sys := startWorkload(t, buildC(t, "syscalls"), 60)
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

// processCPU sums the on-CPU time of all threads of pid (schedstat, ns).
func processCPU(t *testing.T, pid uint32) time.Duration {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schedstat for pid %d: %v", pid, err)
	}
	var total time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // thread exited
		}
		first, _, _ := strings.Cut(string(b), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		total += time.Duration(ns)
	}
	return total
}

func pidCounts(samples []RawSample) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, s := range samples {
		out[s.PID] += s.Value
	}
	return out
}

// TestDrainLosesNothing drains repeatedly while a target runs; once it has
// exited every recorded sample must have been drained exactly once.
func TestDrainLosesNothing(t *testing.T) {
	requireRoot(t)
	bin := buildC(t, "cpuburn")
	pid := startWorkload(t, bin, 1.5)
	s := openSampler(t, Options{SamplesPerSecond: 999, TargetPIDs: []uint32{pid}})

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
