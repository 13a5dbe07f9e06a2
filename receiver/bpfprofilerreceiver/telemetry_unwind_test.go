package bpfprofilerreceiver

import (
	"context"
	"testing"
	"time"

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

// Two CPU drain windows and an off-CPU one: walks and frames add up by
// kind, files without a table are counted by reason, and the table gauges
// (shared by the kinds) end at the last window's values.
func TestUnwindTelemetry(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(tel))
	require.NoError(t, err)

	first := capture.Stats{UnwindFrames: 40, UnwindTables: 3, UnwindTableBytes: 3000}
	first.UnwindEnds[capture.UnwindRoot] = 4
	first.UnwindEnds[capture.UnwindNoMapping] = 1
	first.TableFailures[capture.TableOpenFailed] = 2
	first.TablesReady = []time.Duration{0, 30 * time.Millisecond, 2 * time.Second}
	second := capture.Stats{UnwindFrames: 10, UnwindTables: 2, UnwindTableBytes: 1200}
	second.UnwindEnds[capture.UnwindRoot] = 1
	ctx := context.Background()
	rcv.recordSourceStats(ctx, report.KindCPU, mechPerfEvent, first)
	rcv.recordSourceStats(ctx, report.KindCPU, mechPerfEvent, second)
	offCPU := capture.Stats{UnwindFrames: 21, UnwindTables: 4, UnwindTableBytes: 1500}
	offCPU.UnwindEnds[capture.UnwindRoot] = 3
	rcv.recordSourceStats(ctx, report.KindOffCPU, mechTaskWork, offCPU)

	reason := func(r string) attribute.Set { return attribute.NewSet(attribute.String(attrReason, r)) }
	kindReason := func(k, r string) attribute.Set {
		return attribute.NewSet(attribute.String(attrKind, k), attribute.String(attrReason, r))
	}
	kind := func(k string) attribute.Set { return attribute.NewSet(attribute.String(attrKind, k)) }
	metadatatest.AssertEqualBpfprofilerUnwindWalks(t, tel, []metricdata.DataPoint[int64]{
		{Value: 5, Attributes: kindReason("cpu", "root")},
		{Value: 1, Attributes: kindReason("cpu", "no_mapping")},
		{Value: 3, Attributes: kindReason("off_cpu", "root")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerUnwindFrames(t, tel, []metricdata.DataPoint[int64]{
		{Value: 50, Attributes: kind("cpu")},
		{Value: 21, Attributes: kind("off_cpu")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerUnwindTablesFailed(t, tel, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: reason("open_failed")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerUnwindTables(t, tel, []metricdata.DataPoint[int64]{{Value: 4}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerUnwindTablesReady(t, tel, []metricdata.HistogramDataPoint[float64]{{
		Count: 3, Sum: 2.03,
		Bounds:       []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		BucketCounts: []uint64{1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
		Min:          metricdata.NewExtrema(0.0), Max: metricdata.NewExtrema(2.0),
	}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerUnwindTableBytes(t, tel, []metricdata.DataPoint[int64]{{Value: 1500}}, metricdatatest.IgnoreTimestamp())

	// With frame pointers only, the gauges stay where they are.
	fp := createDefaultConfig().(*Config)
	fp.Unwinding.Method = unwindFramePointer
	rcv.cfg = fp
	rcv.recordSourceStats(ctx, report.KindCPU, mechPerfEvent, capture.Stats{})
	metadatatest.AssertEqualBpfprofilerUnwindTables(t, tel, []metricdata.DataPoint[int64]{{Value: 4}}, metricdatatest.IgnoreTimestamp())
}

// The symbol cache gauges end at what the symbolizer's caches held when
// last recorded, up or down.
func TestSymbolCacheTelemetry(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(tel))
	require.NoError(t, err)
	ctx := context.Background()
	rcv.recordSymbolCache(ctx, symbolize.CacheSizes{Files: 7, FileBytes: 9 << 20, PerfMapBytes: 4096, Processes: 30, Frames: 900})
	rcv.recordSymbolCache(ctx, symbolize.CacheSizes{Files: 3, FileBytes: 2 << 20, Processes: 31, Frames: 1200})
	gauge := func(v int64) []metricdata.DataPoint[int64] { return []metricdata.DataPoint[int64]{{Value: v}} }
	metadatatest.AssertEqualBpfprofilerSymbolCacheFiles(t, tel, gauge(3), metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerSymbolCacheFileBytes(t, tel, gauge(2<<20), metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerSymbolCachePerfMapBytes(t, tel, gauge(0), metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerSymbolCacheProcesses(t, tel, gauge(31), metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerSymbolCacheFrames(t, tel, gauge(1200), metricdatatest.IgnoreTimestamp())
}
