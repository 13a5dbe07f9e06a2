package bpfprofilerreceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// fakeSource stands in for the kernel: every drain returns the same stacks.
type fakeSource struct {
	mu     sync.Mutex
	stacks []capture.RawStack
	drains int
	closed bool
	// events are its announcements; nil: none.
	events chan capture.ProcessEvent
}

func (f *fakeSource) Drain() ([]capture.RawStack, capture.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drains++
	st := capture.Stats{Recorded: 10, LostMapFull: 1}
	st.UserStackLost[capture.StackMapFull] = 2
	return f.stacks, st, nil
}

func (f *fakeSource) Mechanism() string { return mechPerfEvent }

func (f *fakeSource) NewProcesses() <-chan capture.ProcessEvent {
	if f.events == nil {
		return nil
	}
	return f.events
}

func (f *fakeSource) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

//go:noinline
func fakeHotFunction() int { return 42 }

// pcOf returns a return address inside fn, the way a frame-pointer walk sees
// a caller frame.
func pcOf(fn any) uint64 { return uint64(reflect.ValueOf(fn).Pointer()) + 1 }

func TestReportPipelineWithFakeKernel(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })

	pid := uint32(os.Getpid())
	src := &fakeSource{stacks: []capture.RawStack{
		{PID: pid, TID: pid, Comm: "tester", Frames: capture.StackFrames(nil, []uint64{pcOf(fakeHotFunction)}), Value: 3},
		{PID: pid, TID: pid + 1, Frames: capture.StackFrames(nil, []uint64{0x10}), Value: 1}, // unresolvable
	}}
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 100 * time.Millisecond
	cfg.Pprof.Directory = t.TempDir()

	sink := new(consumertest.ProfilesSink)
	set := metadatatest.NewSettings(tel)
	rcv, err := newProfilerReceiver(cfg, set)
	require.NoError(t, err)
	rcv.kernel.stacks = func(*Config, report.Kind, sourceOptions) (stackSource, error) { return src, nil }
	rcv.setProfilesConsumer(sink)

	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	require.Eventually(t, func() bool { return len(sink.AllProfiles()) >= 2 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, rcv.Shutdown(context.Background()))
	require.NoError(t, rcv.Shutdown(context.Background()), "second shutdown")
	assert.True(t, src.closed)

	pd := sink.AllProfiles()[0]
	require.Equal(t, 1, pd.ResourceProfiles().Len())
	attrs := pdata.ProcessAttributes(pd)[int64(pid)]
	assert.Equal(t, int64(pid), attrs["process.pid"])
	exe, _ := os.Executable()
	assert.Equal(t, exe, attrs["process.executable.path"])
	_, ok := pd.ResourceProfiles().At(0).Resource().Attributes().Get("host.name")
	assert.True(t, ok, "host.name on the resource")

	sp := pd.ResourceProfiles().At(0).ScopeProfiles()
	require.Equal(t, 1, sp.Len())
	assert.Equal(t, "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver", sp.At(0).Scope().Name())
	for i := 0; i < sp.At(0).Profiles().Len(); i++ {
		require.NoError(t, pprofiletest.ValidateProfile(pd.Dictionary(), sp.At(0).Profiles().At(i)))
	}
	totals := pdata.FunctionTotals(pd)
	assert.Equal(t, int64(3), totals["github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver.fakeHotFunction"], "totals: %v", totals)
	// The unresolvable frame keeps a location named for display (counted
	// unsymbolized below, and in no function total).
	dict := pd.Dictionary()
	var displayed []string
	for _, loc := range dict.LocationTable().All() {
		if loc.Address() != 0x10 {
			continue
		}
		for _, l := range loc.Lines().All() {
			fn := dict.FunctionTable().At(int(l.FunctionIndex()))
			displayed = append(displayed, dict.StringTable().At(int(fn.NameStrindex())))
		}
	}
	assert.Equal(t, []string{"0x10"}, displayed)
	assert.NotContains(t, totals, "0x10")

	files, err := filepath.Glob(filepath.Join(cfg.Pprof.Directory, "cpu-*.pb.gz"))
	require.NoError(t, err)
	assert.NotEmpty(t, files)

	// Every sample handed on is in the collector's own receiver metrics,
	// by sample type.
	var samples int64
	for _, pd := range sink.AllProfiles() {
		samples += int64(pd.SampleCount())
	}
	assert.Equal(t, map[string]int64{"receiver=bpfprofiler,sample_type=samples:count,transport=bpf": samples},
		counters(t, tel, "otelcol_receiver_accepted_profile_samples"))

	drains := int64(src.drains)
	cpu := attribute.String("kind", "cpu")
	metadatatest.AssertEqualBpfprofilerSamplesRecorded(t, tel,
		[]metricdata.DataPoint[int64]{{Value: 10 * drains, Attributes: attribute.NewSet(cpu, attribute.String("mechanism", "perf_event"))}},
		metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerSamplesLost(t, tel,
		[]metricdata.DataPoint[int64]{{Value: drains, Attributes: attribute.NewSet(cpu, attribute.String("reason", "map_full"))}},
		metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerStacksLost(t, tel,
		[]metricdata.DataPoint[int64]{{Value: 2 * drains, Attributes: attribute.NewSet(cpu,
			attribute.String("stack", "user"), attribute.String("reason", "stack_map_full"))}},
		metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerProcessesSeen(t, tel,
		[]metricdata.DataPoint[int64]{{Value: drains}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerFramesUnsymbolized(t, tel,
		[]metricdata.DataPoint[int64]{{Value: drains}}, metricdatatest.IgnoreTimestamp())
}

func TestStartFailsWhenSourceFails(t *testing.T) {
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(componenttest.NewTelemetry()))
	require.NoError(t, err)
	rcv.setProfilesConsumer(consumertest.NewNop())
	rcv.kernel.stacks = func(*Config, report.Kind, sourceOptions) (stackSource, error) {
		return nil, errors.New("cpu::samples_per_second 200000 exceeds kernel.perf_event_max_sample_rate 100000")
	}
	err = rcv.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "perf_event_max_sample_rate")
	require.NoError(t, rcv.Shutdown(context.Background()))
}

func TestStartFailsOnMissingTargetPID(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Targets.PIDs = []uint32{1 << 30}
	rcv, err := newProfilerReceiver(cfg, metadatatest.NewSettings(componenttest.NewTelemetry()))
	require.NoError(t, err)
	err = rcv.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "targets::pids: process 1073741824 does not exist")
}

func TestSharedInstanceForProfilesAndLogs(t *testing.T) {
	f := NewFactory().(xreceiver.Factory)
	cfg := f.CreateDefaultConfig()
	set := metadatatest.NewSettings(componenttest.NewTelemetry())
	p, err := f.CreateProfiles(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	l, err := f.CreateLogs(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	assert.Same(t, p, l)
	require.NoError(t, p.Shutdown(context.Background()))
}

// In a logs pipeline only, profiling would be wasted: no kernel source is
// opened.
func TestNoProfilingWithoutProfilesPipeline(t *testing.T) {
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(componenttest.NewTelemetry()))
	require.NoError(t, err)
	rcv.setLogsConsumer(consumertest.NewNop())
	opened := 0
	rcv.kernel.stacks = func(*Config, report.Kind, sourceOptions) (stackSource, error) {
		opened++
		return &fakeSource{}, nil
	}
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, rcv.Shutdown(context.Background()))
	assert.Zero(t, opened)
}

// A kernel that lacks what off-CPU profiling needs: Start logs which feature
// is missing and runs the CPU profile; with nothing else enabled it fails.
func TestUnsupportedSourceKeepsTheRestRunning(t *testing.T) {
	unsupported := fmt.Errorf("off_cpu::mechanism task_work needs kfunc x (Linux 6.18): %w", ebpf.ErrNotSupported)
	open := func(_ *Config, kind report.Kind, _ sourceOptions) (stackSource, error) {
		if kind == report.KindOffCPU {
			return nil, unsupported
		}
		return &fakeSource{}, nil
	}
	for _, tt := range []struct {
		name    string
		cpu     bool
		wantErr bool
	}{{"cpu keeps running", true, false}, {"nothing left", false, true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.CPU.Enabled = tt.cpu
			cfg.OffCPU.Enabled = true
			core, logs := observer.New(zap.InfoLevel)
			set := receivertest.NewNopSettings(metadata.Type)
			set.Logger = zap.New(core)
			rcv, err := newProfilerReceiver(cfg, set)
			require.NoError(t, err)
			rcv.kernel.stacks = open
			rcv.setProfilesConsumer(new(consumertest.ProfilesSink))
			err = rcv.Start(context.Background(), componenttest.NewNopHost())
			t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })
			if tt.wantErr {
				require.ErrorIs(t, err, ebpf.ErrNotSupported)
				return
			}
			require.NoError(t, err)
			assert.Len(t, rcv.sources, 1)
			found := logs.FilterMessageSnippet("off_cpu profiling is not supported on this kernel").All()
			require.Len(t, found, 1)
			assert.Contains(t, found[0].ContextMap()["error"], "kfunc x (Linux 6.18)")
		})
	}
}
