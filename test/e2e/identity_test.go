//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The collector names a workload's pod and container, from its cgroup and
// the runtime's bundle file under host_root, on every resource the debug
// exporter prints, and on its samples those resource_attributes_on_samples
// asks for.
func TestCollectorReportsPodIdentity(t *testing.T) {
	bin := collectorBinary(t)
	pod := testutil.NewFakePod(t, "checkout-e2e")
	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	pod.MoveInto(t, work.Process.Pid)

	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 1s
    targets: {container_ids: ['%s']}
    cpu: {samples_per_second: 49}
    kubernetes: {host_root: %s}
    resource_attributes_on_samples: [k8s.pod.name, k8s.namespace.name]
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
`, pod.ContainerID[:12], pod.HostRoot))

	want := []string{
		fmt.Sprintf("process.pid: Int(%d)", work.Process.Pid),
		"container.id: Str(" + pod.ContainerID + ")",
		"container.runtime.name: Str(containerd)",
		"k8s.pod.uid: Str(" + pod.UID + ")",
		"k8s.pod.name: Str(" + pod.Name + ")",
		"k8s.namespace.name: Str(" + pod.Namespace + ")",
		"k8s.container.name: Str(" + pod.ContainerName + ")",
		"service.name: Str(" + pod.ContainerName + ")",
	}
	require.Eventually(t, func() bool { return strings.Contains(out.String(), want[0]) },
		30*time.Second, 200*time.Millisecond, "no resource of the workload in the debug output")
	for _, w := range want {
		assert.Contains(t, out.String(), w)
	}
	// The pod's name and namespace are on the samples too (the debug
	// exporter indents a sample's attributes further), its uid is not.
	const onSample = "             -> "
	assert.Contains(t, out.String(), onSample+"k8s.pod.name: Str("+pod.Name+")")
	assert.Contains(t, out.String(), onSample+"k8s.namespace.name: Str("+pod.Namespace+")")
	assert.NotContains(t, out.String(), onSample+"k8s.pod.uid:")
	// The container filter keeps only the workload.
	assert.NotContains(t, out.String(), "process.executable.name: Str(otelcol-bpfprofiler)")
}
