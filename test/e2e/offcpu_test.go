//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Off-CPU profiling alone (cpu disabled): the profile of a workload whose
// threads sleep in two named functions reaches the debug exporter and the
// pprof files.
func TestCollectorOffCPUProfile(t *testing.T) {
	bin := collectorBinary(t)
	pprofDir := t.TempDir()
	work := exec.Command(testutil.BuildC(t, "sleepers.c"), "ratio", "100000")
	stdin, err := work.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, work.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = work.Process.Kill(); _ = work.Wait() })
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)

	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 1s
    targets: {pids: [%d]}
    cpu: {enabled: false}
    off_cpu: {enabled: true, min_block: 1ms}
    pprof: {directory: %s}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
`, work.Process.Pid, pprofDir))

	require.Eventually(t, func() bool {
		files, _ := filepath.Glob(filepath.Join(pprofDir, "offcpu-*.pb.gz"))
		return len(files) >= 2 && strings.Contains(out.String(), "sleep_long")
	}, 30*time.Second, 200*time.Millisecond, "no off-CPU profile")
	assert.Contains(t, out.String(), "off_cpu")
	assert.Contains(t, out.String(), "sleep_short")

	files, err := filepath.Glob(filepath.Join(pprofDir, "offcpu-*.pb.gz"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", files[len(files)-1]).CombinedOutput()
	require.NoError(t, err, string(top))
	assert.Contains(t, string(top), "sleep_long")
	assert.Contains(t, string(top), "Type: off_cpu")
	cpuFiles, _ := filepath.Glob(filepath.Join(pprofDir, "cpu-*.pb.gz"))
	assert.Empty(t, cpuFiles, "cpu sampling is disabled")
}
