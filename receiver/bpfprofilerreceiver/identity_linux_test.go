//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// A workload placed in a kubelet-shaped cgroup v2 hierarchy, with a
// containerd bundle config.json under host_root, is reported with its pod
// and container identity.
func TestResourceIdentityFromCgroupAndRuntime(t *testing.T) {
	testutil.RequireBPF(t)
	pod := testutil.NewFakePod(t, "checkout-7d9f")
	work := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	pod.MoveInto(t, work.Process.Pid)

	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 500 * time.Millisecond
	cfg.CPU.SamplesPerSecond = 99
	cfg.Targets.PIDs = []uint32{uint32(work.Process.Pid)}
	cfg.Kubernetes.HostRoot = pod.HostRoot
	sink := new(consumertest.ProfilesSink)
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })
	require.Eventually(t, func() bool { return len(sink.AllProfiles()) > 0 }, 20*time.Second, 50*time.Millisecond)

	pd := sink.AllProfiles()[0]
	require.Equal(t, 1, pd.ResourceProfiles().Len())
	got := pdata.ProcessAttributes(pd)[int64(work.Process.Pid)]
	want := map[string]any{
		"process.pid":            int64(work.Process.Pid),
		"container.id":           pod.ContainerID,
		"container.runtime.name": "containerd",
		"k8s.pod.uid":            pod.UID,
		"k8s.pod.name":           pod.Name,
		"k8s.namespace.name":     pod.Namespace,
		"k8s.container.name":     pod.ContainerName,
		"service.name":           pod.ContainerName,
	}
	for k, v := range want {
		assert.Equal(t, v, got[k], "attribute %s (all: %v)", k, got)
	}
}
