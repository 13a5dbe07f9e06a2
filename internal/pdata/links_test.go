package pdata

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Samples taken inside probe scopes link to the scopes' log records (one
// link per scope, shared by its samples) and carry probe.id; a probe's
// duration profile names its probe on every sample.
func TestBuildProfilesLinks(t *testing.T) {
	slow := &report.ScopeLink{TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4, 5}, ProbeID: "handler"}
	other := &report.ScopeLink{TraceID: [16]byte{9}, SpanID: [8]byte{8}, ProbeID: "handler"}
	durations := report.Profile{Kind: report.KindProbeDuration, Start: t0, End: t1, ProbeID: "handler",
		Processes: []report.Process{process(1, nil, report.Sample{TID: 1, Frames: coldStack(), Value: 50_000_000})}}
	p, err := BuildProfiles(Scope{}, cpu(process(1, nil,
		report.Sample{TID: 1, Frames: hotStack(), Value: 3, Link: slow},
		report.Sample{TID: 1, Frames: coldStack(), Value: 2, Link: slow},
		report.Sample{TID: 1, Frames: coldStack(), Value: 1, Link: other},
		report.Sample{TID: 1, Frames: coldStack(), Value: 7},
	)), durations)
	require.NoError(t, err)
	decode(t, p) // validates every profile

	dict := p.Dictionary()
	require.Equal(t, 3, dict.LinkTable().Len(), "the zero link and one per scope")
	profs := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	require.Equal(t, 2, profs.Len())
	type got struct {
		trace pcommon.TraceID
		span  pcommon.SpanID
		probe string
	}
	sampleLink := func(s pprofile.Sample) got {
		attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
		require.NoError(t, err)
		var g got
		if v, ok := attrs.Get(attrkey.ProbeID); ok {
			g.probe = v.Str()
		}
		if s.LinkIndex() > 0 {
			l := dict.LinkTable().At(int(s.LinkIndex()))
			g.trace, g.span = l.TraceID(), l.SpanID()
		}
		return g
	}
	var links []got
	for _, s := range profs.At(0).Samples().All() {
		links = append(links, sampleLink(s))
	}
	assert.Equal(t, []got{
		{pcommon.TraceID(slow.TraceID), pcommon.SpanID(slow.SpanID), "handler"},
		{pcommon.TraceID(slow.TraceID), pcommon.SpanID(slow.SpanID), "handler"},
		{pcommon.TraceID(other.TraceID), pcommon.SpanID(other.SpanID), "handler"},
		{},
	}, links)

	d := profs.At(1)
	assert.Equal(t, "probe_duration", dict.StringTable().At(int(d.SampleType().TypeStrindex())))
	assert.Equal(t, "nanoseconds", dict.StringTable().At(int(d.SampleType().UnitStrindex())))
	require.Equal(t, 1, d.Samples().Len())
	assert.Equal(t, got{probe: "handler"}, sampleLink(d.Samples().At(0)))
	assert.Equal(t, int64(50_000_000), d.Samples().At(0).Values().At(0))

	assertRoundTrip(t, p)
}
