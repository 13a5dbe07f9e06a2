//go:build linux

// Package e2e runs the ocb-built collector (make collector) against real
// workloads and checks what reaches the debug exporter, the pprof files and
// a real OTLP endpoint.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// collectorBinary returns the collector built by `make collector`.
func collectorBinary(t *testing.T) string {
	t.Helper()
	testutil.RequireBPF(t)
	bin := os.Getenv("BPFPROFILER_COLLECTOR")
	if bin == "" {
		if os.Getenv(testutil.RequireBPFEnv) == "1" {
			t.Fatal("BPFPROFILER_COLLECTOR is not set; run the tests with `make test`")
		}
		t.Skip("BPFPROFILER_COLLECTOR is not set; `make test` builds the collector and sets it")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("collector binary: %v", err)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for the collector's output goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// exited, where set, is closed when the process writing here exited.
	exited <-chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startCollector runs the collector on config and stops it at cleanup.
func startCollector(t *testing.T, bin, config string) *syncBuffer {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o600))
	return runCollector(t, exec.Command(bin, "--config", cfgPath, "--feature-gates=service.profilesSupport"))
}

// runCollector starts cmd, the collector or a command that execs it, and
// stops it at cleanup.
func runCollector(t *testing.T, cmd *exec.Cmd) *syncBuffer {
	t.Helper()
	out, _ := runStoppableCollector(t, cmd)
	return out
}

// waitReady waits for the collector to log that it is running: on an
// emulated 5.10 guest loading its programs takes a minute or two, longer
// than a check's own wait for data, which starts from here.
func waitReady(t *testing.T, out *syncBuffer) {
	t.Helper()
	wait := testutil.Patient(5 * time.Minute)
	deadline := time.After(wait)
	for !strings.Contains(out.String(), "Everything is ready") {
		select {
		case <-out.exited: // nil (never ready) when not set
			if !strings.Contains(out.String(), "Everything is ready") {
				t.Fatalf("the collector exited before it was ready")
			}
		case <-deadline:
			t.Fatalf("the collector did not start within %v", wait)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// profilesTo is a collector config of the receiver's settings (YAML
// lines at the indentation under bpfprofiler:, each ending in a newline)
// sending its profiles to the OTLP gRPC endpoint addr, with the
// collector's own metrics off.
func profilesTo(receiver, addr string) string {
	return profilesWithMetrics(receiver, addr, "{level: none}")
}

// profilesMetricsTo is profilesTo with the collector's own metrics served
// in Prometheus form on 127.0.0.1:metricsPort.
func profilesMetricsTo(receiver, addr string, metricsPort int) string {
	return profilesWithMetrics(receiver, addr, fmt.Sprintf(`
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}`, metricsPort))
}

func profilesWithMetrics(receiver, addr, metrics string) string {
	return fmt.Sprintf(`
receivers:
  bpfprofiler:
%sexporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry:
    metrics: %s
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc]}
`, receiver, addr, metrics)
}

// startStoppableCollector runs the collector on config; stop ends it before
// cleanup does (see runStoppableCollector).
func startStoppableCollector(t *testing.T, bin, config string) (out *syncBuffer, stop func() error) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o600))
	return runStoppableCollector(t, exec.Command(bin, "--config", cfgPath, "--feature-gates=service.profilesSupport"))
}

// runStoppableCollector starts cmd and returns stop, which sends SIGTERM
// and waits for it to exit; it kills it after 20 s and then returns an
// error. Cleanup calls stop too; a second call returns the first's result.
// The collector's output goes to the buffer the tests search, so it is no
// testutil.Child; it runs in its own process group (testutil.OwnGroup), killed with
// what it started once it exited or at the deadline.
func runStoppableCollector(t *testing.T, cmd *exec.Cmd) (*syncBuffer, func() error) {
	t.Helper()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	testutil.OwnGroup(cmd)
	cmd.WaitDelay = 5 * time.Second // a descendant holding the output open ends no wait
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	out.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	var (
		once    sync.Once
		stopErr error
	)
	stop := func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				testutil.KillGroup(cmd.Process) // what it started and left behind
			case <-time.After(20 * time.Second):
				testutil.KillGroup(cmd.Process)
				select {
				case <-exited:
				case <-time.After(testutil.Patient(30 * time.Second)):
					stopErr = fmt.Errorf("the collector (pid %d) not reaped after SIGKILL", cmd.Process.Pid)
					return
				}
				stopErr = fmt.Errorf("the collector did not exit within 20 s of SIGTERM")
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		if t.Failed() {
			// Its goroutines' stacks say where it stood (SIGQUIT: Go
			// prints them and exits).
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-exited:
			case <-time.After(testutil.Patient(5 * time.Second)):
			}
		}
		_ = stop()
		if t.Failed() {
			t.Logf("collector output:\n%s", out.String())
		}
	})
	return out, stop
}

func TestCollectorEndToEnd(t *testing.T) {
	bin := collectorBinary(t)
	burner := testutil.BuildC(t, "cpuburn.c")
	otlp, addr := startOTLPServer(t)
	pprofDir := t.TempDir()
	metricsPort := freePort(t)

	// It outlives every wait below; cleanup stops it.
	work := testutil.StartChild(t, exec.Command(burner, fmt.Sprint(testutil.Patient(10*time.Minute).Seconds())))

	config := fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 199}
    pprof: {directory: %s}
processors:
  memory_limiter: {check_interval: 1s, limit_mib: 256}
exporters:
  debug: {verbosity: basic}
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
    profiles:
      receivers: [bpfprofiler]
      processors: [memory_limiter]
      exporters: [debug, otlp_grpc]
`, work.Pid(), pprofDir, addr, metricsPort)
	out := startCollector(t, bin, config)
	waitReady(t, out)

	// ~2000 samples: the share's standard error is about 1 point.
	require.Eventually(t, func() bool {
		hot, cold := hotCold(otlp)
		return hot+cold >= 2000
	}, testutil.Patient(90*time.Second), 500*time.Millisecond, "the OTLP endpoint received too few samples")

	t.Run("debug exporter shows resource profiles", func(t *testing.T) {
		assert.Contains(t, out.String(), `"resource profiles": 1`)
	})

	t.Run("OTLP endpoint has the hot function at 75% with whole stacks", func(t *testing.T) {
		hot, cold := hotCold(otlp)
		share := float64(hot) / float64(hot+cold)
		st := burnStacks(otlp)
		t.Logf("burn_hot=%d burn_cold=%d share=%.3f", hot, cold, share)
		matrixFigure(t, "hot %.3f, named %.1f%%, chains %.1f%%, vDSO frames named %d of %d", share, 100*st.named(), 100*st.chains(),
			st.vdsoNamed, st.vdsoNamed+st.vdsoUnnamed)
		assert.InDelta(t, 0.75, share, 0.05)
		assert.GreaterOrEqual(t, st.named(), 0.95, "samples of the workload naming burn_hot or burn_cold")
		assert.GreaterOrEqual(t, st.chains(), 0.95, "burn_* samples whose caller is run")
		// cpuburn reads its clocks through the vDSO: those frames are named.
		assert.Zero(t, st.vdsoUnnamed, "samples in the vDSO without a function name")
	})

	t.Run("own metrics on the collector's endpoint", func(t *testing.T) {
		metrics := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		recorded := metricValue(metrics, "otelcol_bpfprofiler_samples_recorded")
		t.Logf("otelcol_bpfprofiler_samples_recorded=%v", recorded)
		assert.Greater(t, recorded, 1000.0)
		assert.Greater(t, metricValue(metrics, "otelcol_bpfprofiler_processes_seen"), 0.0)
	})

	t.Run("pprof files open and show the hot function", func(t *testing.T) {
		totals := pprofTotals(t, pprofDir, "cpu")
		assert.Positive(t, totals["burn_hot"])
		assert.Positive(t, totals["burn_cold"])
	})
}

// burnTotals are the samples of the cpuburn workload: all of them, those
// naming burn_hot or burn_cold, and those of the latter whose caller is run;
// and those with a frame in the vDSO, named and not.
type burnTotals struct{ all, burning, chained, vdsoNamed, vdsoUnnamed int64 }

// named is the share of the workload's samples that name a burn function.
func (b burnTotals) named() float64 { return ratio(b.burning, b.all) }

// chains is the share of those whose caller is run.
func (b burnTotals) chains() float64 { return ratio(b.chained, b.burning) }

func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// burnStacks checks the stacks the OTLP endpoint received from cpuburn.
func burnStacks(s *otlpProfilesServer) burnTotals { return burnStacksOf(s, 0) }

// burnStacksOf checks the stacks of cpuburn's process pid (0: every
// process's) the OTLP endpoint received.
func burnStacksOf(s *otlpProfilesServer, pid int) burnTotals {
	var b burnTotals
	for _, pd := range s.all() {
		if pid != 0 {
			pd = pdata.OfPID(pd, pid)
		}
		for _, st := range pdata.Stacks(pd) {
			b.all += st.Value
			for _, fn := range st.Functions {
				switch {
				case strings.HasPrefix(fn, "[vdso]"):
					b.vdsoUnnamed += st.Value
				case strings.HasPrefix(fn, "__vdso_") || strings.HasPrefix(fn, "__kernel_") || fn == "clock_gettime":
					b.vdsoNamed += st.Value
				}
			}
			for i, fn := range st.Functions {
				if fn != "burn_hot" && fn != "burn_cold" {
					continue
				}
				b.burning += st.Value
				if i+1 < len(st.Functions) && st.Functions[i+1] == "run" {
					b.chained += st.Value
				}
				break
			}
		}
	}
	return b
}

// matrixFigure logs the figure the kernel matrix (make test-kernels) shows
// for this test in its table.
func matrixFigure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("matrix: "+format, args...)
}

// hotCold sums the samples of the workload's two functions over every
// request the OTLP endpoint has received.
func hotCold(s *otlpProfilesServer) (hot, cold int64) {
	for _, pd := range s.all() {
		totals := pdata.FunctionTotals(pd)
		hot += totals["burn_hot"]
		cold += totals["burn_cold"]
	}
	return hot, cold
}

func TestCollectorRejectsBadConfig(t *testing.T) {
	bin := collectorBinary(t)
	cfg := `
receivers:
  bpfprofiler:
    cpu: {samples_per_second: 0}
exporters:
  debug: {}
service:
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
`
	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	out, err := testutil.RunWithin(exec.Command(bin, "--config", path, "--feature-gates=service.profilesSupport"), testutil.Patient(2*time.Minute))
	require.Error(t, err)
	assert.True(t, strings.Contains(string(out), "cpu::samples_per_second"), string(out))
}
