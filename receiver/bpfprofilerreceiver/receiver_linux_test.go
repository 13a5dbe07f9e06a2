//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// profileWorkload profiles the running process pid for window under a
// receiver that targets it at hz samples per second. It returns every profile
// emitted and the CPU time the process used meanwhile.
func profileWorkload(t *testing.T, pid int, hz uint64, window time.Duration) ([]pprofile.Profiles, time.Duration) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = time.Second
	cfg.CPU.SamplesPerSecond = hz
	cfg.Targets.PIDs = []uint32{uint32(pid)}
	sink := new(consumertest.ProfilesSink)
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	cpuBefore := testutil.ProcessCPU(t, pid)
	time.Sleep(window) // the measurement window, not a wait for a condition
	cpu := testutil.ProcessCPU(t, pid) - cpuBefore
	require.NoError(t, rcv.Shutdown(context.Background()))

	all := sink.AllProfiles()
	for _, pd := range all {
		validate(t, pd)
	}
	return all, cpu
}

func validate(t *testing.T, pd pprofile.Profiles) {
	t.Helper()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		sps := pd.ResourceProfiles().At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			for k := 0; k < sps.At(j).Profiles().Len(); k++ {
				require.NoError(t, pprofiletest.ValidateProfile(pd.Dictionary(), sps.At(j).Profiles().At(k)))
			}
		}
	}
}

func totals(all []pprofile.Profiles, leaf bool) map[string]int64 {
	sum := map[string]int64{}
	for _, pd := range all {
		t := pdata.FunctionTotals(pd)
		if leaf {
			t = pdata.LeafTotals(pd)
		}
		for fn, v := range t {
			sum[fn] += v
		}
	}
	return sum
}

func TestCPUShareOfTwoFunctions(t *testing.T) {
	testutil.RequireBPF(t)
	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	// ~2900 samples: the share's standard error is under 1 point.
	const hz = 297
	all, cpu := profileWorkload(t, work.Process.Pid, hz, 5*time.Second)
	fn := totals(all, false)
	hot, cold := fn["burn_hot"], fn["burn_cold"]
	require.Positive(t, hot+cold, "functions seen: %v", fn)
	share := float64(hot) / float64(hot+cold)
	t.Logf("burn_hot=%d burn_cold=%d share=%.3f", hot, cold, share)
	assert.InDelta(t, 0.75, share, 0.05)
	// The burning threads run under libc's start_thread, which only libc's
	// separate debug file names (libc6-dbg, installed by make test-tools).
	if libcDebugInstalled(t, work.Process.Pid) {
		t.Logf("start_thread=%d", fn["start_thread"])
		assert.Greater(t, float64(fn["start_thread"]), 0.9*float64(hot+cold), "functions: %v", fn)
	}
	// One sample per period of CPU time the workload really got, give or
	// take the edges of the window.
	expected := cpu.Seconds() * hz
	t.Logf("samples %d, expected %.0f from %v of CPU", hot+cold, expected, cpu)
	assert.InDelta(t, expected, float64(hot+cold), 0.15*expected)
}

func TestGoFunctionHasFullName(t *testing.T) {
	testutil.RequireBPF(t)
	work := testutil.StartWorkload(t, testutil.BuildGo(t, "gohot"), "60")
	all, _ := profileWorkload(t, work.Process.Pid, 99, 3*time.Second)
	fn := totals(all, false)
	var total int64
	for _, pd := range all {
		total += pdata.Total(pd)
	}
	hot, mainGoroutine := fn["main.(*Cruncher).hotLoop"], fn["main.main"]
	t.Logf("main.(*Cruncher).hotLoop=%d, main.main=%d of %d samples", hot, mainGoroutine, total)
	require.Positive(t, total)
	// The main goroutine runs nothing but the hot loop; the rest of the
	// samples are the runtime's own threads (sysmon, GC, preemption).
	assert.Greater(t, float64(hot)/float64(mainGoroutine), 0.95, "functions: %v", fn)
	assert.Greater(t, float64(hot)/float64(total), 0.7, "functions: %v", fn)
}

func TestKernelFramesForSyscalls(t *testing.T) {
	testutil.RequireBPF(t)
	work := testutil.StartWorkload(t, testutil.BuildC(t, "syscalls.c"), "60")
	all, _ := profileWorkload(t, work.Process.Pid, 99, 3*time.Second)
	var kernel, total int64
	names := map[string]bool{}
	for _, pd := range all {
		dict := pd.Dictionary()
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			sps := pd.ResourceProfiles().At(i).ScopeProfiles()
			for j := 0; j < sps.Len(); j++ {
				for k := 0; k < sps.At(j).Profiles().Len(); k++ {
					samples := sps.At(j).Profiles().At(k).Samples()
					for s := 0; s < samples.Len(); s++ {
						v := sampleValue(samples.At(s))
						total += v
						if frames := kernelFrames(dict, samples.At(s)); len(frames) > 0 {
							kernel += v
							for _, f := range frames {
								names[f] = true
							}
						}
					}
				}
			}
		}
	}
	t.Logf("samples with kernel frames: %d of %d", kernel, total)
	require.Positive(t, total)
	assert.Greater(t, float64(kernel)/float64(total), 0.5)
	var syscallEntry bool
	for n := range names {
		if strings.Contains(n, "syscall") {
			syscallEntry = true
		}
	}
	assert.True(t, syscallEntry, "no syscall entry among kernel frames %v", names)
}

func TestStartShutdownTwice(t *testing.T) {
	testutil.RequireBPF(t)
	for range 2 {
		cfg := createDefaultConfig().(*Config)
		rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
			metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, consumertest.NewNop())
		require.NoError(t, err)
		require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
		require.NoError(t, rcv.Shutdown(context.Background()))
	}
}

func TestTooHighFrequencyNamesBothNumbers(t *testing.T) {
	testutil.RequireBPF(t)
	cfg := createDefaultConfig().(*Config)
	cfg.CPU.SamplesPerSecond = maxSamplesPerSecond
	limit := readSysctl(t)
	if limit >= maxSamplesPerSecond {
		t.Logf("kernel.perf_event_max_sample_rate %d ≥ %d: checking that Start succeeds", limit, maxSamplesPerSecond)
	}
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = rcv.Start(context.Background(), componenttest.NewNopHost())
	if limit < maxSamplesPerSecond {
		require.ErrorContains(t, err, "perf_event_max_sample_rate")
		require.ErrorContains(t, err, itoa(int(limit)))
	} else {
		require.NoError(t, err)
	}
	require.NoError(t, rcv.Shutdown(context.Background()))
}

// A JIT workload in a nested pid namespace (a container, as a DaemonSet
// collector sees it) writes /tmp/perf-1.map: it is pid 1 there. The receiver
// finds it through the innermost NSpid column and resolves the JIT frame.
func TestJITFramesOfProcessInNestedPIDNamespace(t *testing.T) {
	testutil.RequireBPF(t)
	jit := testutil.BuildC(t, "jitburn.c")
	unshare := testutil.StartWorkload(t, "unshare", "--pid", "--fork", "--mount-proc", jit, "60")
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare.Process.Pid, unshare.Process.Pid))
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(b), &pid)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	// Killing unshare leaves its child running: it would burn a CPU under
	// the next tests.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/root/tmp/perf-1.map", pid))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the workload did not write its perf map")

	all, _ := profileWorkload(t, pid, 99, 2*time.Second)
	fn := totals(all, true)
	var total int64
	for _, pd := range all {
		total += pdata.Total(pd)
	}
	t.Logf("jit_hot_loop=%d of %d samples (leaf)", fn["jit_hot_loop"], total)
	require.Positive(t, total)
	assert.Greater(t, float64(fn["jit_hot_loop"])/float64(total), 0.8, "leaf functions: %v", fn)
}

// A process that lives for a third of a report interval and is gone
// (binary deleted too) when its samples are drained is still named and
// symbolized: the sampler announces it at its first sample and the receiver
// reads its maps, files and identity once it has lived readDelay.
func TestShortLivedProcessIsSymbolized(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "cpuburn.c")
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 3 * time.Second
	cfg.CPU.SamplesPerSecond = 199
	cfg.Targets.Executables = []string{"^" + regexp.QuoteMeta(bin) + "$"}
	sink := new(consumertest.ProfilesSink)
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })

	work := exec.Command(bin, "1")
	b, err := testutil.RunWithin(work, testutil.Patient(time.Minute))
	require.NoError(t, err, "%s", b)
	require.NoError(t, os.Remove(bin))
	require.Eventually(t, func() bool { return len(sink.AllProfiles()) > 0 }, 10*time.Second, 50*time.Millisecond)

	pd := sink.AllProfiles()[0]
	require.Equal(t, 1, pd.ResourceProfiles().Len())
	attrs := pdata.ProcessAttributes(pd)[int64(work.Process.Pid)]
	assert.Equal(t, int64(work.Process.Pid), attrs["process.pid"])
	assert.Equal(t, "cpuburn", attrs["process.executable.name"])
	fn := pdata.FunctionTotals(pd)
	t.Logf("burn_hot=%d burn_cold=%d of %d samples", fn["burn_hot"], fn["burn_cold"], pdata.Total(pd))
	assert.Greater(t, float64(fn["burn_hot"]+fn["burn_cold"])/float64(pdata.Total(pd)), 0.8)
}
