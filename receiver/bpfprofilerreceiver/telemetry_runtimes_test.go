package bpfprofilerreceiver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// assertInt64 is a generated metadatatest.AssertEqual* of an int64 metric.
type assertInt64 func(*testing.T, *componenttest.Telemetry, []metricdata.DataPoint[int64], ...metricdatatest.Option)

// runtimeMetrics are the assertions of the metrics of one runtime walked
// apart besides CPython.
type runtimeMetrics struct {
	walks, walkFrames, stacksLost, frames, unsymbolized, processes assertInt64
}

// CPU and off-CPU windows of Ruby or PHP processes: walks by reason, frames
// read and lost stacks add up by kind under that runtime's metrics only, the
// process gauge ends at the last window's value, and frames named and
// unnamed are counted by the symbolizer's increments.
func TestApartRuntimeTelemetry(t *testing.T) {
	tests := []struct {
		runtime   capture.Runtime
		walks     func(*capture.Stats) *capture.RuntimeWalks
		processes func(*capture.Stats) *uint64
		metrics   runtimeMetrics
		// other are the other runtime's counters, which must stay unrecorded
		// (as must CPython's).
		other []string
	}{
		{
			runtime:   capture.Ruby,
			walks:     func(st *capture.Stats) *capture.RuntimeWalks { return &st.RubyWalks },
			processes: func(st *capture.Stats) *uint64 { return &st.RubyProcesses },
			metrics: runtimeMetrics{
				walks: metadatatest.AssertEqualBpfprofilerRubyWalks, walkFrames: metadatatest.AssertEqualBpfprofilerRubyWalkFrames,
				stacksLost: metadatatest.AssertEqualBpfprofilerRubyStacksLost, frames: metadatatest.AssertEqualBpfprofilerRubyFrames,
				unsymbolized: metadatatest.AssertEqualBpfprofilerRubyFramesUnsymbolized, processes: metadatatest.AssertEqualBpfprofilerRubyProcesses,
			},
			other: []string{"php_walks", "php_walk_frames", "php_stacks_lost", "php_frames", "php_frames_unsymbolized"},
		},
		{
			runtime:   capture.PHP,
			walks:     func(st *capture.Stats) *capture.RuntimeWalks { return &st.PHPWalks },
			processes: func(st *capture.Stats) *uint64 { return &st.PHPProcesses },
			metrics: runtimeMetrics{
				walks: metadatatest.AssertEqualBpfprofilerPhpWalks, walkFrames: metadatatest.AssertEqualBpfprofilerPhpWalkFrames,
				stacksLost: metadatatest.AssertEqualBpfprofilerPhpStacksLost, frames: metadatatest.AssertEqualBpfprofilerPhpFrames,
				unsymbolized: metadatatest.AssertEqualBpfprofilerPhpFramesUnsymbolized, processes: metadatatest.AssertEqualBpfprofilerPhpProcesses,
			},
			other: []string{"ruby_walks", "ruby_walk_frames", "ruby_stacks_lost", "ruby_frames", "ruby_frames_unsymbolized"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.runtime.Name(), func(t *testing.T) {
			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
			rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(tel))
			require.NoError(t, err)

			var cpu, offCPU capture.Stats
			w := tt.walks(&cpu)
			w.Ends[capture.RuntimeRoot], w.Ends[capture.RuntimeNoThread] = 5, 2
			w.Ends[capture.RuntimeReadFault], w.Ends[capture.RuntimeDepth] = 4, 1
			w.Frames, w.StackLost = 70, 3
			*tt.processes(&cpu) = 3
			w = tt.walks(&offCPU)
			w.Ends[capture.RuntimeRoot], w.Frames = 6, 9
			*tt.processes(&offCPU) = 2
			name := tt.runtime.Name()
			first := symbolize.Stats{RuntimeFrames: map[string]uint64{name: 10},
				RuntimeUnsymbolized: map[string]map[string]uint64{name: {symbolize.RuntimeBadObject: 2}}}
			second := symbolize.Stats{RuntimeFrames: map[string]uint64{name: 15},
				RuntimeUnsymbolized: map[string]map[string]uint64{name: {symbolize.RuntimeBadObject: 3, symbolize.RuntimeMemory: 1}}}
			ctx := context.Background()
			rcv.recordSourceStats(ctx, report.KindCPU, mechPerfEvent, cpu)
			rcv.recordSourceStats(ctx, report.KindOffCPU, mechTaskWork, offCPU)
			rcv.recordRubySymbolization(ctx, first)
			rcv.recordPHPSymbolization(ctx, first)
			rcv.recordRubySymbolization(ctx, second)
			rcv.recordPHPSymbolization(ctx, second)

			kindReason := func(k, r string) attribute.Set {
				return attribute.NewSet(attribute.String(attrKind, k), attribute.String(attrReason, r))
			}
			kind := func(k string) attribute.Set { return attribute.NewSet(attribute.String(attrKind, k)) }
			reason := func(r string) attribute.Set { return attribute.NewSet(attribute.String(attrReason, r)) }
			ignoreTime := metricdatatest.IgnoreTimestamp()
			tt.metrics.walks(t, tel, []metricdata.DataPoint[int64]{
				{Value: 5, Attributes: kindReason("cpu", "root")},
				{Value: 2, Attributes: kindReason("cpu", "no_thread_state")},
				{Value: 4, Attributes: kindReason("cpu", "read_fault")},
				{Value: 1, Attributes: kindReason("cpu", "depth_limit")},
				{Value: 6, Attributes: kindReason("off_cpu", "root")},
			}, ignoreTime)
			tt.metrics.walkFrames(t, tel, []metricdata.DataPoint[int64]{
				{Value: 70, Attributes: kind("cpu")},
				{Value: 9, Attributes: kind("off_cpu")},
			}, ignoreTime)
			tt.metrics.stacksLost(t, tel, []metricdata.DataPoint[int64]{{Value: 3, Attributes: kind("cpu")}}, ignoreTime)
			tt.metrics.processes(t, tel, []metricdata.DataPoint[int64]{{Value: 2}}, ignoreTime)
			tt.metrics.frames(t, tel, []metricdata.DataPoint[int64]{{Value: 15}}, ignoreTime)
			tt.metrics.unsymbolized(t, tel, []metricdata.DataPoint[int64]{
				{Value: 3, Attributes: reason("bad_code")},
				{Value: 1, Attributes: reason("memory")},
			}, ignoreTime)
			for _, m := range append(tt.other, "python_walks", "python_frames", "python_stacks_lost") {
				_, err := tel.GetMetric("otelcol_bpfprofiler_" + m)
				require.Error(t, err, "%s's counters recorded as %s", name, m)
			}
		})
	}
}
