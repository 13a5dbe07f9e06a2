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

// CPU and off-CPU windows of CPython processes: walks by reason, frames and
// lost stacks add up by kind, the process gauge ends at the last window's
// value by version (a version gone drops to 0), and unnamed frames are counted by the symbolizer's increments.
func TestPythonTelemetry(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	rcv, err := newProfilerReceiver(createDefaultConfig().(*Config), metadatatest.NewSettings(tel))
	require.NoError(t, err)

	cpu := capture.Stats{PythonFrames: 70, PythonStackLost: 1, PythonProcesses: 3, PythonUnsupported: 2,
		PythonUnsupportedErrors: []string{"unsupported CPython 3.16.0: inconsistent _Py_DebugOffsets"},
		PythonVersions:          map[string]uint64{"3.14": 2, "3.11": 1}}
	cpu.PythonEnds[capture.RuntimeRoot] = 5
	cpu.PythonEnds[capture.RuntimeNoThread] = 2
	offCPU := capture.Stats{PythonFrames: 9, PythonProcesses: 2, PythonVersions: map[string]uint64{"3.14": 1, "3.16": 1}}
	offCPU.PythonEnds[capture.RuntimeRoot] = 3
	ctx := context.Background()
	rcv.recordSourceStats(ctx, report.KindCPU, mechPerfEvent, cpu)
	rcv.recordSourceStats(ctx, report.KindOffCPU, mechTaskWork, offCPU)
	rcv.recordPythonSymbolization(ctx, map[string]uint64{symbolize.RuntimeBadObject: 2})
	rcv.recordPythonSymbolization(ctx, map[string]uint64{symbolize.RuntimeBadObject: 3, symbolize.RuntimeMemory: 1})

	kindReason := func(k, r string) attribute.Set {
		return attribute.NewSet(attribute.String(attrKind, k), attribute.String(attrReason, r))
	}
	kind := func(k string) attribute.Set { return attribute.NewSet(attribute.String(attrKind, k)) }
	reason := func(r string) attribute.Set { return attribute.NewSet(attribute.String(attrReason, r)) }
	metadatatest.AssertEqualBpfprofilerPythonWalks(t, tel, []metricdata.DataPoint[int64]{
		{Value: 5, Attributes: kindReason("cpu", "root")},
		{Value: 2, Attributes: kindReason("cpu", "no_thread_state")},
		{Value: 3, Attributes: kindReason("off_cpu", "root")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerPythonFrames(t, tel, []metricdata.DataPoint[int64]{
		{Value: 70, Attributes: kind("cpu")},
		{Value: 9, Attributes: kind("off_cpu")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerPythonStacksLost(t, tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: kind("cpu")},
	}, metricdatatest.IgnoreTimestamp())
	version := func(v string) attribute.Set { return attribute.NewSet(attribute.String(attrVersion, v)) }
	metadatatest.AssertEqualBpfprofilerPythonProcesses(t, tel, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: version("3.14")},
		{Value: 0, Attributes: version("3.11")},
		{Value: 1, Attributes: version("3.16")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerPythonInterpretersUnsupported(t, tel, []metricdata.DataPoint[int64]{{Value: 2}},
		metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualBpfprofilerPythonFramesUnsymbolized(t, tel, []metricdata.DataPoint[int64]{
		{Value: 3, Attributes: reason("bad_code")},
		{Value: 1, Attributes: reason("memory")},
	}, metricdatatest.IgnoreTimestamp())
}
