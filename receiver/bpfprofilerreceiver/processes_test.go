package bpfprofilerreceiver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// An announced process is read once it has lived readDelay, once however
// many sources announce it; one that exits before is never read. Both are
// counted in process_reads.
func TestFollowProcessesDefersReads(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	cpu := &fakeSource{events: make(chan capture.ProcessEvent, 8)}
	offCPU := &fakeSource{events: make(chan capture.ProcessEvent, 8)}
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 100 * time.Millisecond
	cfg.OffCPU.Enabled = true
	rcv, err := newProfilerReceiver(cfg, metadatatest.NewSettings(tel))
	require.NoError(t, err)
	rcv.kernel.stacks = func(_ *Config, kind report.Kind, _ sourceOptions) (stackSource, error) {
		if kind == report.KindOffCPU {
			return offCPU, nil
		}
		return cpu, nil
	}
	rcv.setProfilesConsumer(consumertest.NewNop())
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })

	self, parent := uint32(os.Getpid()), uint32(os.Getppid())
	start := time.Now()
	cpu.events <- capture.ProcessEvent{PID: self}
	offCPU.events <- capture.ProcessEvent{PID: self}
	cpu.events <- capture.ProcessEvent{PID: parent}
	cpu.events <- capture.ProcessEvent{PID: parent, Exit: true}
	require.Eventually(t, func() bool { return rcv.ids.Known(self) }, 5*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), readDelay, "read before it lived readDelay")
	assert.False(t, rcv.ids.Known(parent), "a process announced as exited before its read was due was read")

	want := map[string]int64{"outcome=read": 1, "outcome=exited": 1}
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual(want, counters(t, tel, "otelcol_bpfprofiler_process_reads"))
	}, 5*time.Second, 20*time.Millisecond, "process_reads: %v", counters(t, tel, "otelcol_bpfprofiler_process_reads"))
}
