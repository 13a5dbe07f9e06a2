//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// daemonSetCgroup is a memory cgroup with the DaemonSet's limit, and the
// environment with its GOMEMLIMIT (deploy/kubernetes/daemonset.yaml).
func daemonSetCgroup(t *testing.T) (*testutil.MemoryCgroup, []string) {
	t.Helper()
	ds := testutil.ShippedDaemonSetMemory(t)
	return newMemoryCgroup(t, ds.Limit), append(os.Environ(), "GOMEMLIMIT="+ds.GoMemLimit)
}

// The OTLP gRPC and HTTP exporters as the DaemonSet's configuration ships
// them, in a memory cgroup with the DaemonSet's limit: the backend down (a
// closed port), then letting one request in per interval, then healthy. The
// collector is never killed, its memory stays bounded, its queues within
// their capacity, and export resumes within a report of the backend's
// return.
func TestFaultBackendDownAndSlow(t *testing.T) {
	bin, full := faultLength(t)
	down, slow, slowEvery := time.Minute, 40*time.Second, 20*time.Second
	if full {
		down, slow, slowEvery = 30*time.Minute, 10*time.Minute, time.Minute
	}
	const reportInterval = 10 * time.Second
	testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "100000")
	grpcAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsPort := freePort(t)
	config := backendFaultConfig(t, grpcAddr, httpAddr, metricsPort, reportInterval)
	path := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))

	cg, env := daemonSetCgroup(t)
	argv := cg.Wrap(bin, "--config", path, "--feature-gates=service.profilesSupport")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, stop := runStoppableCollector(t, cmd)
	waitReady(t, out)
	pid := cmd.Process.Pid
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)

	var peakRSS uint64
	var peakHeap float64           // the Go heap's allocated bytes, from the collector's own metrics
	queued := map[string]float64{} // exporter -> its queue's largest size seen
	watch := func(phase string, d time.Duration) {
		t.Helper()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			time.Sleep(time.Second)
			require.Zero(t, cg.OOMKills(), "%s: the collector was killed for memory", phase)
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			require.NoError(t, err, "%s: the collector exited:\n%s", phase, out)
			text := scrape(t, metrics)
			peakRSS = max(peakRSS, uint64(metricValue(text, "otelcol_process_memory_rss")))
			peakHeap = max(peakHeap, metricValue(text, "otelcol_process_runtime_heap_alloc_bytes"))
			for _, e := range []string{"otlp_grpc", "otlp_http"} {
				size := metricValue(text, "otelcol_exporter_queue_size", `exporter="`+e+`"`)
				capacity := metricValue(text, "otelcol_exporter_queue_capacity", `exporter="`+e+`"`)
				require.LessOrEqual(t, size, capacity, "%s: %s's queue over its capacity", phase, e)
				queued[e] = max(queued[e], size)
			}
		}
		faultFigure(t, "%s for %v: collector RSS peak %.0f MiB (Go heap %.0f MiB), cgroup peak %.0f MiB (limit %d MiB), queues' peak %.1f and %.1f MiB (gRPC, HTTP)",
			phase, d, mib(peakRSS), peakHeap/(1<<20), mib(cg.Peak()), testutil.ShippedDaemonSetMemory(t).Limit>>20, queued["otlp_grpc"]/(1<<20), queued["otlp_http"]/(1<<20))
	}

	// Down: nothing listens on either port.
	watch("backend down", down)

	// Slow: one request in per slowEvery, on both protocols.
	slowSink := &releasedSink{every: slowEvery}
	stopSlow := serveReleased(t, slowSink, grpcAddr, httpAddr)
	watch("backend slow", slow)
	stopSlow()
	admitted := len(slowSink.requests())

	// Healthy: both exporters send again within a report.
	healthy := &releasedSink{}
	back := time.Now()
	serveReleased(t, healthy, grpcAddr, httpAddr)
	var grpcAt, httpAt time.Duration
	require.Eventually(t, func() bool {
		g, h := healthy.protocols()
		if g > 0 && grpcAt == 0 {
			grpcAt = time.Since(back)
		}
		if h > 0 && httpAt == 0 {
			httpAt = time.Since(back)
		}
		return g > 0 && h > 0
	}, testutil.Patient(3*reportInterval), 100*time.Millisecond, "export did not resume:\n%s", out)
	text := scrape(t, metrics)
	counted := exporterCounters(text)
	require.NoError(t, stop())
	require.NotContains(t, out.String(), "panic")
	require.LessOrEqual(t, max(grpcAt, httpAt), reportInterval+testutil.Patient(2*time.Second),
		"export resumed after more than a report")
	faultFigure(t, "the slow backend let in %d requests; export resumed %v (gRPC) and %v (HTTP) after the backend returned; the collector counted %v",
		admitted, grpcAt.Round(100*time.Millisecond), httpAt.Round(100*time.Millisecond), counted)
}

// backendFaultConfig is the receiver profiling host-wide at 99 Hz, the
// shipped memory_limiter, and the shipped otlp_grpc exporter twice: as it is
// to grpcAddr and as otlp_http to httpAddr; with the collector's own
// metrics on metricsPort.
func backendFaultConfig(t *testing.T, grpcAddr, httpAddr string, metricsPort int, report time.Duration) string {
	t.Helper()
	exporter := shippedExporter(t, "otlp_grpc")
	exporter["endpoint"] = grpcAddr
	grpcBlock, err := json.Marshal(exporter)
	require.NoError(t, err)
	httpExporter := maps.Clone(exporter)
	delete(httpExporter, "tls")
	httpExporter["endpoint"] = "http://" + httpAddr
	httpBlock, err := json.Marshal(httpExporter)
	require.NoError(t, err)
	var shipped struct {
		Processors map[string]map[string]any `yaml:"processors"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(testutil.ShippedCollectorYAML(t)), &shipped))
	limiter, err := json.Marshal(shipped.Processors["memory_limiter"])
	require.NoError(t, err)
	return fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: %v
    cpu: {samples_per_second: 99}
processors:
  memory_limiter: %s
exporters:
  otlp_grpc: %s
  otlp_http: %s
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
    profiles: {receivers: [bpfprofiler], processors: [memory_limiter], exporters: [otlp_grpc, otlp_http]}
`, report, limiter, grpcBlock, httpBlock, metricsPort)
}

// serveReleased serves s over gRPC on grpcAddr and over HTTP on httpAddr;
// stop closes both (cleanup does too).
func serveReleased(t *testing.T, s *releasedSink, grpcAddr, httpAddr string) (stop func()) {
	t.Helper()
	gl, err := net.Listen("tcp", grpcAddr)
	require.NoError(t, err)
	hl, err := net.Listen("tcp", httpAddr)
	require.NoError(t, err)
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes))
	collectorpb.RegisterProfilesServiceServer(gs, s)
	go func() { _ = gs.Serve(gl) }()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1development/profiles", s.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	stop = func() { gs.Stop(); _ = hs.Close() }
	t.Cleanup(stop)
	return stop
}

// exporterCounters are the collector's own counters of what its exporters
// sent, failed to send and failed to queue, by name.
func exporterCounters(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, _, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "otelcol_exporter_") || strings.Contains(name, "queue") {
			continue
		}
		out[name] = metricValue(text, name)
	}
	return out
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
