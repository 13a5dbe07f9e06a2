//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The collector runs inside its own pid namespace (as a sidecar sharing a
// pod's process namespace would), together with a workload that it targets
// by the pid the workload has there. BPF sees host pids; the receiver must
// report and resolve everything with namespace pids, including the JIT
// frames the workload announces in /tmp/perf-<its pid>.map.
func TestCollectorInsidePIDNamespace(t *testing.T) {
	bin := collectorBinary(t)
	jit := testutil.BuildC(t, "jitburn.c")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "collector.yaml")
	// In the namespace sh is pid 1 and forks the workload first: pid 2.
	// Then sh execs the collector, which becomes pid 1.
	require.NoError(t, os.WriteFile(cfgPath, []byte(`
receivers:
  bpfprofiler:
    report_interval: 1s
    targets: {pids: [2]}
    cpu: {samples_per_second: 99}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
`), 0o600))
	out := &syncBuffer{}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
		fmt.Sprintf("%s 60 >/dev/null & exec %s --config %s --feature-gates=service.profilesSupport", jit, bin, cfgPath))
	cmd.Stdout, cmd.Stderr = out, out
	testutil.OwnGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// Killing the namespace's init (the collector) ends the workload too.
		testutil.KillGroup(cmd.Process)
		select {
		case <-done:
		case <-time.After(testutil.Patient(30 * time.Second)):
			t.Errorf("unshare (pid %d) not reaped %v after SIGKILL", cmd.Process.Pid, testutil.Patient(30*time.Second))
		}
		if t.Failed() {
			t.Logf("collector output:\n%s", out.String())
		}
	})

	waitReady(t, out)
	require.Eventually(t, func() bool {
		// The debug exporter prints the dictionary's string table one per line.
		return regexp.MustCompile(`(?m)^\s+jit_hot_loop$`).MatchString(out.String())
	}, 30*time.Second, 200*time.Millisecond, "the JIT frame was never resolved")
	text := out.String()
	assert.Contains(t, text, "process.pid: Int(2)")
	assert.Contains(t, text, "process.executable.name: Str(jitburn)")
	assert.Regexp(t, `(?m)^\s+call_jit$`, text, "the workload's own frames are symbolized")
	pids := regexp.MustCompile(`process\.pid: Int\((\d+)\)`).FindAllStringSubmatch(text, -1)
	others := 0
	for _, m := range pids {
		if !assert.Equal(t, "2", m[1], "only the target is profiled") {
			others++
		}
	}
	matrixFigure(t, "%d resources of pid 2, %d of others, JIT frame resolved", len(pids)-others, others)
}
