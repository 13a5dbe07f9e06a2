package bpfprofilerreceiver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/bpfprofiler/bpfprofiler/internal/allocs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// fakeMemory is a memorySource whose counters the test sets.
type fakeMemory struct{ stats allocs.Stats }

func (f *fakeMemory) Drain() allocs.Window { return allocs.Window{} }
func (f *fakeMemory) Stats() allocs.Stats  { return f.stats }
func (f *fakeMemory) Close() error         { return nil }

// The heap profiles' counters are recorded as what changed since the last
// report, each loss under its reason.
func TestRecordMemoryStats(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(tel))
	require.NoError(t, err)
	src := &fakeMemory{stats: allocs.Stats{Executables: 2, Refused: 1, Mallocs: 100, RingbufFull: 3, Evicted: 4}}
	rcv.memory = src
	ctx := context.Background()
	rcv.recordMemoryStats(ctx)
	src.stats.Mallocs, src.stats.Replaced, src.stats.StackLost, src.stats.LabelsLost, src.stats.USDTArgsLost = 150, 1, 2, 5, 6
	rcv.recordMemoryStats(ctx)

	ignoreTime := metricdatatest.IgnoreTimestamp()
	reason := func(r string) attribute.Set { return attribute.NewSet(attribute.String(attrReason, r)) }
	outcome := func(o string) attribute.Set { return attribute.NewSet(attribute.String(attrOutcome, o)) }
	metadatatest.AssertEqualBpfprofilerMemorySamples(t, tel, []metricdata.DataPoint[int64]{{Value: 150}}, ignoreTime)
	metadatatest.AssertEqualBpfprofilerMemoryLosses(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: reason("ringbuf_full"), Value: 3}, {Attributes: reason("evicted"), Value: 4},
		{Attributes: reason("replaced"), Value: 1}, {Attributes: reason("stack_lost"), Value: 2},
		{Attributes: reason("labels_lost"), Value: 5}, {Attributes: reason("args_lost"), Value: 6},
	}, ignoreTime)
	metadatatest.AssertEqualBpfprofilerMemoryExecutables(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: outcome("probed"), Value: 2}, {Attributes: outcome("refused"), Value: 1},
	}, ignoreTime)
	require.Equal(t, [4]bool{true, true, true, false}, rcv.memoryWarned)
}

// Heap profiles are named as runtime/pprof names its heap profile's
// sample types, with a space/bytes period.
func TestMemoryKinds(t *testing.T) {
	for _, tt := range []struct {
		kind      report.Kind
		typ, unit string
	}{
		{report.KindAllocObjects, "alloc_objects", "count"}, {report.KindAllocSpace, "alloc_space", "bytes"},
		{report.KindInuseObjects, "inuse_objects", "count"}, {report.KindInuseSpace, "inuse_space", "bytes"},
	} {
		typ, unit := tt.kind.SampleType()
		require.Equal(t, [2]string{tt.typ, tt.unit}, [2]string{typ, unit})
		typ, unit = tt.kind.PeriodType()
		require.Equal(t, [2]string{"space", "bytes"}, [2]string{typ, unit})
		require.True(t, tt.kind.Memory())
	}
	require.False(t, report.KindCPU.Memory())
}

// hideRuntime drops leading runtime frames, unless nothing would be left.
func TestHideRuntime(t *testing.T) {
	p := report.Profile{Processes: []report.Process{{Samples: []report.Sample{
		{Frames: []report.Frame{{Function: "runtime.mallocgc"}, {Function: "runtime.makeslice"}, {Function: "main.f"}, {Function: "runtime.main"}}},
		{Frames: []report.Frame{{Function: "runtime.malg"}, {Function: "runtime.newproc1"}}},
	}}}}
	hideRuntime(&p)
	s := p.Processes[0].Samples
	require.Equal(t, []report.Frame{{Function: "main.f"}, {Function: "runtime.main"}}, s[0].Frames)
	require.Len(t, s[1].Frames, 2)
}
