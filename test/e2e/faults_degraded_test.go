//go:build linux

package e2e

import (
	"context"
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

// degradedConfig is CPU and off-CPU profiling and a probe, printed by the
// debug exporter.
const degradedConfig = `
receivers:
  bpfprofiler:
    report_interval: 1s
    cpu: {enabled: true}
    off_cpu: {enabled: true}
    probes:
      - {id: degraded.probe, file_match: '/restartprobe$', symbol: fault_outer}
exporters:
  debug: {verbosity: basic}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
    logs: {receivers: [bpfprofiler], exporters: [debug]}
`

// On a node that cannot run the receiver, Start fails within 10 s with an
// error naming the cause and the fix, and the collector shuts down cleanly,
// leaving nothing in the kernel; on a node that lacks only what the receiver
// does without, it runs.
func TestFaultDegradedNodes(t *testing.T) {
	bin, _ := faultLength(t)
	dir := publicDir(t)
	collector, config := filepath.Join(dir, "otelcol"), filepath.Join(dir, "collector.yaml")
	copyFile(t, bin, collector, 0o755)
	require.NoError(t, os.WriteFile(config, []byte(degradedConfig), 0o644))
	args := []string{collector, "--config", config, "--feature-gates=service.profilesSupport"}
	// What a shell runs in a mount namespace of its own before the collector.
	inMountNS := func(setup string) []string {
		return []string{"unshare", "-m", "--propagation", "private", "sh", "-c", setup + ` && exec "$@"`, "sh"}
	}

	for _, tc := range []struct {
		name     string
		paranoid string   // kernel.perf_event_paranoid during the case
		caps     []string // run as uid nobody with these; nil: as root
		wrap     []string // the command the collector runs under
		want     []string // in the error; none: the collector runs
	}{{
		name: "no BTF",
		wrap: inMountNS("mount -t tmpfs none /sys/kernel/btf"),
		want: []string{"has no BTF (/sys/kernel/btf/vmlinux)", "CONFIG_DEBUG_INFO_BTF=y"},
	}, {
		name: "no tracefs",
		wrap: inMountNS("for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do umount $d 2>/dev/null; true; done"),
	}, {
		name: "perf_event_paranoid 3 without CAP_PERFMON", paranoid: "3",
		caps: []string{"bpf", "sys_ptrace", "syslog"},
		want: []string{"the collector lacks CAP_PERFMON; run as root or grant it"},
	}, {
		name: "perf_event_paranoid 3 with CAP_PERFMON", paranoid: "3",
		caps: probeCaps,
	}, {
		name: "without CAP_BPF",
		caps: []string{"perfmon", "sys_ptrace", "syslog"},
		want: []string{"the collector lacks CAP_BPF; run as root or grant it"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.paranoid != "" {
				setSysctl(t, "/proc/sys/kernel/perf_event_paranoid", tc.paranoid)
			}
			base, err := readKernelObjects()
			require.NoError(t, err)
			argv := append(append([]string(nil), tc.wrap...), args...)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Patient(time.Minute))
			defer cancel()
			var cmd *exec.Cmd
			if tc.caps != nil {
				cmd = asNobody(ctx, tc.caps, argv...)
			} else {
				cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
			}
			began := time.Now()
			if len(tc.want) == 0 {
				out, stop := runStoppableCollector(t, cmd)
				waitReady(t, out)
				require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
					testutil.Patient(30*time.Second), 50*time.Millisecond, "the probes were not attached")
				ready := time.Since(began)
				require.NoError(t, stop())
				faultFigure(t, "runs: ready with CPU, off-CPU and a probe in %v", ready.Round(10*time.Millisecond))
			} else {
				b, err := cmd.CombinedOutput()
				took := time.Since(began)
				out := string(b)
				require.Error(t, err, "the collector ran:\n%s", out)
				assert.Less(t, took, testutil.Patient(10*time.Second), "Start failed only after %v", took)
				assert.Contains(t, out, `failed to start "bpfprofiler" receiver`)
				for _, w := range tc.want {
					assert.Contains(t, out, w)
				}
				assert.NotContains(t, out, "panic")
				assert.Contains(t, out, "Shutdown complete.")
				faultFigure(t, "Start failed in %v: %s", took.Round(time.Millisecond), errorLine(out))
			}
			// Nothing left in the kernel (the node runs no other loader
			// meanwhile: what is new is the collector's).
			deadline := time.Now().Add(testutil.Patient(10 * time.Second))
			for {
				now, err := readKernelObjects()
				require.NoError(t, err)
				left := now.since(base)
				if left.empty() {
					break
				}
				require.False(t, time.Now().After(deadline), "left in the kernel: %v", left)
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// errorLine is the collector's last line starting "Error:".
func errorLine(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "Error:") {
			return lines[i]
		}
	}
	return "(no Error: line)"
}

// setSysctl writes value to a /proc/sys file until the test ends.
func setSysctl(t *testing.T, path, value string) {
	t.Helper()
	old, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(value), 0o644))
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	})
}
