//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// With the otlp_grpc exporter as deploy/kubernetes ships it, a backend that
// takes 6 s to answer each request (longer than the exporter's default 5 s
// timeout, after which it retries what the backend already stored) gets
// every report exactly once: no profile id twice, and as many samples as
// the receiver wrote to its pprof files in the same run.
func TestSlowBackendNoDuplicates(t *testing.T) {
	bin := collectorBinary(t)
	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	sink, addr := startReleasedGRPCSink(t, 6*time.Second)
	pprofDir := t.TempDir()

	exporter := shippedExporter(t, "otlp_grpc")
	exporter["endpoint"] = addr
	block, err := json.Marshal(exporter) // JSON is YAML's flow style
	require.NoError(t, err)
	t.Logf("otlp_grpc: %s", block)

	_, stop := startStoppableCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 99}
    pprof: {directory: %s}
exporters:
  otlp_grpc: %s
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc]}
`, work.Process.Pid, pprofDir, block))

	// Seven reports (~14 s: the exporter's first retry of a request that
	// timed out comes 7.5 to 12.5 s after it was sent), then stop: the
	// exporter drains its queue.
	require.Eventually(t, func() bool {
		files, _ := filepath.Glob(filepath.Join(pprofDir, "cpu-*.pb.gz"))
		return len(files) >= 7
	}, 40*time.Second, 200*time.Millisecond, "the receiver wrote too few reports")
	stopped := time.Now()
	require.NoError(t, stop())
	t.Logf("the collector took %v to stop", time.Since(stopped).Round(100*time.Millisecond))

	profiles, err := readReleased(sink.requests())
	require.NoError(t, err)
	totals, repeated := totalsByID(profiles)
	received, written := sum(totals), pprofSampleTotal(t, pprofDir, "cpu")
	t.Logf("%d requests, %d profiles (%d distinct), %d samples received; %d samples in the pprof files",
		len(sink.requests()), len(profiles), len(totals), received, written)
	assert.Empty(t, repeated, "profile ids received more than once")
	assert.Positive(t, written)
	assert.Equal(t, written, received, "samples received vs written to pprof files")
}

// shippedExporter returns the exporter block name of the collector
// configuration deploy/kubernetes/configmap.yaml ships.
func shippedExporter(t *testing.T, name string) map[string]any {
	t.Helper()
	const file = "deploy/kubernetes/configmap.yaml"
	var cfg struct {
		Exporters map[string]map[string]any `yaml:"exporters"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(testutil.ShippedCollectorYAML(t)), &cfg), "%s: data.collector.yaml", file)
	block, ok := cfg.Exporters[name]
	require.True(t, ok, "%s: no exporters::%s", file, name)
	return block
}
