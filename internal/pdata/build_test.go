package pdata

import (
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

var (
	t0 = time.Unix(1_700_000_000, 0)
	t1 = t0.Add(10 * time.Second)

	appMap  = &report.Mapping{Start: 0x400000, Limit: 0x800000, File: "/app/server", BuildIDGo: "go-build-id", BuildIDGNU: "abcdef"}
	libcMap = &report.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000200000, Offset: 0x28000, File: "/usr/lib/libc.so.6", BuildIDGNU: "c0ffee"}
	kernMap = &report.Mapping{File: "[kernel.kallsyms]"}
)

// hotStack: kernel leaf, libc, then a Go frame with an inlined callee.
func hotStack() []report.Frame {
	return []report.Frame{
		{Address: 0xffffffff81000010, Function: "do_syscall_64", Type: report.FrameKernel, Mapping: kernMap},
		{Address: 0x7f0000030000, Function: "write", File: "write.c", Line: 26, Type: report.FrameNative, Mapping: libcMap},
		{Address: 0x401000, Function: "main.inner", File: "main.go", Line: 10, Type: report.FrameGo, Inlined: true, Mapping: appMap},
		{Address: 0x401000, Function: "main.hot", File: "main.go", Line: 20, Type: report.FrameGo, Mapping: appMap},
		{Address: 0x402000, Function: "main.main", File: "main.go", Line: 30, Type: report.FrameGo, Mapping: appMap},
	}
}

func coldStack() []report.Frame {
	return []report.Frame{
		{Address: 0x403000, Function: "main.cold", File: "main.go", Line: 40, Type: report.FrameGo, Mapping: appMap},
		{Address: 0x402000, Function: "main.main", File: "main.go", Line: 30, Type: report.FrameGo, Mapping: appMap},
	}
}

func process(pid uint32, attrs map[string]any, samples ...report.Sample) report.Process {
	return report.Process{
		Identity: report.Identity{PID: pid, ExeName: "server", ExePath: "/app/server", Attributes: attrs},
		Samples:  samples,
	}
}

func cpu(procs ...report.Process) report.Profile {
	return report.Profile{Kind: report.KindCPU, Start: t0, End: t1, Period: 52631578, Processes: procs}
}

func offcpu(procs ...report.Process) report.Profile {
	return report.Profile{Kind: report.KindOffCPU, Start: t0, End: t1, Processes: procs}
}

// decoded* are plain views of built profiles, resolved through the dictionary.
type decodedLocation struct {
	Address   uint64
	Mapping   string
	FrameType string
	Functions []string // innermost first
}

type decodedSample struct {
	Value      int64
	ThreadID   int64
	ThreadName string
	Process    map[string]any // the sample's other attributes
	Stack      []decodedLocation
}

type decodedProfile struct {
	SampleType, SampleUnit string
	PeriodType, PeriodUnit string
	Period                 int64
	Samples                []decodedSample
}

type decodedResource struct {
	Attributes map[string]any
	Scope      Scope
	Profiles   []decodedProfile
}

func decode(t *testing.T, p pprofile.Profiles) []decodedResource {
	t.Helper()
	dict := p.Dictionary()
	str := func(i int32) string {
		require.Less(t, int(i), dict.StringTable().Len())
		return dict.StringTable().At(int(i))
	}
	var out []decodedResource
	for _, rp := range p.ResourceProfiles().All() {
		require.Equal(t, 1, rp.ScopeProfiles().Len(), "one scope per resource")
		sp := rp.ScopeProfiles().At(0)
		dr := decodedResource{
			Attributes: rp.Resource().Attributes().AsRaw(),
			Scope:      Scope{sp.Scope().Name(), sp.Scope().Version()},
		}
		for _, prof := range sp.Profiles().All() {
			require.NoError(t, pprofiletest.ValidateProfile(dict, prof))
			require.False(t, prof.ProfileID().IsEmpty())
			require.Equal(t, uint64(t0.UnixNano()), uint64(prof.Time().AsTime().UnixNano()))
			require.Equal(t, uint64(t1.Sub(t0)), prof.DurationNano())
			dp := decodedProfile{
				SampleType: str(prof.SampleType().TypeStrindex()), SampleUnit: str(prof.SampleType().UnitStrindex()),
				PeriodType: str(prof.PeriodType().TypeStrindex()), PeriodUnit: str(prof.PeriodType().UnitStrindex()),
				Period: prof.Period(),
			}
			for _, s := range prof.Samples().All() {
				attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
				require.NoError(t, err)
				ds := decodedSample{Value: s.Values().At(0)}
				if v, ok := attrs.Get(attrkey.ThreadID); ok {
					ds.ThreadID = v.Int()
				}
				if v, ok := attrs.Get(attrkey.ThreadName); ok {
					ds.ThreadName = v.Str()
				}
				attrs.RemoveIf(func(k string, _ pcommon.Value) bool { return k == attrkey.ThreadID || k == attrkey.ThreadName })
				ds.Process = attrs.AsRaw()
				for _, li := range dict.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
					require.Positive(t, li)
					loc := dict.LocationTable().At(int(li))
					dl := decodedLocation{Address: loc.Address()}
					if mi := loc.MappingIndex(); mi > 0 {
						dl.Mapping = str(dict.MappingTable().At(int(mi)).FilenameStrindex())
					}
					la, err := pprofile.FromAttributeIndices(dict.AttributeTable(), loc, dict)
					require.NoError(t, err)
					if v, ok := la.Get(attrkey.ProfileFrameType); ok {
						dl.FrameType = v.Str()
					}
					for _, l := range loc.Lines().All() {
						dl.Functions = append(dl.Functions, functionName(dict, l.FunctionIndex()))
					}
					ds.Stack = append(ds.Stack, dl)
				}
				dp.Samples = append(dp.Samples, ds)
			}
			dr.Profiles = append(dr.Profiles, dp)
		}
		out = append(out, dr)
	}
	return out
}

var wantHotStack = []decodedLocation{
	{Address: 0xffffffff81000010, Mapping: "[kernel.kallsyms]", FrameType: "kernel", Functions: []string{"do_syscall_64"}},
	{Address: 0x7f0000030000, Mapping: "/usr/lib/libc.so.6", FrameType: "native", Functions: []string{"write"}},
	{Address: 0x401000, Mapping: "/app/server", FrameType: "go", Functions: []string{"main.inner", "main.hot"}},
	{Address: 0x402000, Mapping: "/app/server", FrameType: "go", Functions: []string{"main.main"}},
}

var wantColdStack = []decodedLocation{
	{Address: 0x403000, Mapping: "/app/server", FrameType: "go", Functions: []string{"main.cold"}},
	{Address: 0x402000, Mapping: "/app/server", FrameType: "go", Functions: []string{"main.main"}},
}

func TestBuildProfiles(t *testing.T) {
	scope := Scope{Name: "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver", Version: "0.1.0"}
	cpuHeader := decodedProfile{SampleType: "samples", SampleUnit: "count", PeriodType: "cpu", PeriodUnit: "nanoseconds", Period: 52631578}
	offHeader := decodedProfile{SampleType: "off_cpu", SampleUnit: "nanoseconds"}
	withSamples := func(h decodedProfile, s ...decodedSample) decodedProfile {
		h.Samples = s
		return h
	}
	fullAttrs := map[string]any{
		"process.pid": int64(42), "process.executable.name": "server", "process.executable.path": "/app/server",
		"host.name": "node-1", "container.id": "abc123", "k8s.pod.name": "web-0", "service.name": "web",
	}
	server := func(pid int64, more ...any) map[string]any {
		m := map[string]any{"process.pid": pid, "process.executable.name": "server", "process.executable.path": "/app/server"}
		for i := 0; i+1 < len(more); i += 2 {
			m[more[i].(string)] = more[i+1]
		}
		return m
	}

	tests := []struct {
		name    string
		reports []report.Profile
		want    []decodedResource
	}{
		{name: "no reports"},
		{name: "no processes", reports: []report.Profile{cpu(), offcpu()}},
		{name: "process without samples is skipped", reports: []report.Profile{cpu(process(7, nil))}},
		{
			name: "cpu, a process of a container: container on the resource, process and service.name on the samples",
			reports: []report.Profile{cpu(process(42, fullAttrs,
				report.Sample{TID: 43, ThreadName: "worker", Frames: hotStack(), Value: 3},
				report.Sample{TID: 42, ThreadName: "server", Frames: coldStack(), Value: 1},
			))},
			want: []decodedResource{{
				Attributes: map[string]any{"host.name": "node-1", "container.id": "abc123", "k8s.pod.name": "web-0", "service.name": "web"},
				Scope:      scope,
				Profiles: []decodedProfile{withSamples(cpuHeader,
					decodedSample{Value: 3, ThreadID: 43, ThreadName: "worker", Process: server(42, "service.name", "web"), Stack: wantHotStack},
					decodedSample{Value: 1, ThreadID: 42, ThreadName: "server", Process: server(42, "service.name", "web"), Stack: wantColdStack},
				)},
			}},
		},
		{
			name: "a host process: identity fields fill missing attributes, values typed, service.name on the samples",
			reports: []report.Profile{cpu(process(9, map[string]any{
				"host.name": "node-1", "some.int": 5, "some.uint32": uint32(7), "some.bool": true, "service.name": "server",
			}, report.Sample{TID: 9, Frames: coldStack(), Value: 2}))},
			want: []decodedResource{{
				Attributes: map[string]any{"host.name": "node-1"},
				Scope:      scope,
				Profiles: []decodedProfile{withSamples(cpuHeader, decodedSample{Value: 2, ThreadID: 9, Stack: wantColdStack,
					Process: server(9, "some.int", int64(5), "some.uint32", int64(7), "some.bool", true, "service.name", "server")})},
			}},
		},
		{
			name: "host processes share one resource, containers get one each, one profile per kind in each",
			reports: []report.Profile{
				cpu(
					process(5, map[string]any{"host.name": "n"}, report.Sample{TID: 5, ThreadName: "a", Frames: hotStack(), Value: 1}),
					process(6, map[string]any{"host.name": "n", "container.id": "c1", "service.name": "web"},
						report.Sample{TID: 6, Frames: coldStack(), Value: 2}),
					process(7, map[string]any{"host.name": "n"}, report.Sample{TID: 7, Frames: coldStack(), Value: 3}),
				),
				offcpu(process(5, map[string]any{"host.name": "n"}, report.Sample{TID: 8, ThreadName: "b", Frames: coldStack(), Value: 1_000_000})),
			},
			want: []decodedResource{
				{
					Attributes: map[string]any{"host.name": "n"},
					Scope:      scope,
					Profiles: []decodedProfile{
						withSamples(cpuHeader,
							decodedSample{Value: 1, ThreadID: 5, ThreadName: "a", Process: server(5), Stack: wantHotStack},
							decodedSample{Value: 3, ThreadID: 7, Process: server(7), Stack: wantColdStack}),
						withSamples(offHeader, decodedSample{Value: 1_000_000, ThreadID: 8, ThreadName: "b", Process: server(5), Stack: wantColdStack}),
					},
				},
				{
					Attributes: map[string]any{"host.name": "n", "container.id": "c1", "service.name": "web"},
					Scope:      scope,
					Profiles:   []decodedProfile{withSamples(cpuHeader, decodedSample{Value: 2, ThreadID: 6, Process: server(6, "service.name", "web"), Stack: wantColdStack})},
				},
			},
		},
		{
			name: "unsymbolized frames keep address and mapping, named by address; empty stack",
			reports: []report.Profile{cpu(process(3, map[string]any{"process.pid": int64(3)},
				report.Sample{TID: 3, Value: 1, Frames: []report.Frame{
					{Address: 0x7f0000031234, Type: report.FrameNative, Mapping: libcMap},
					{Address: 0x1234, Type: report.FrameNative},
				}},
				report.Sample{TID: 3, Value: 4},
			))},
			want: []decodedResource{{
				Attributes: map[string]any{},
				Scope:      scope,
				Profiles: []decodedProfile{withSamples(cpuHeader,
					decodedSample{Value: 1, ThreadID: 3, Process: server(3), Stack: []decodedLocation{
						{Address: 0x7f0000031234, Mapping: "/usr/lib/libc.so.6", FrameType: "native", Functions: []string{"libc.so.6+0x59234"}},
						{Address: 0x1234, FrameType: "native", Functions: []string{"0x1234"}},
					}},
					decodedSample{Value: 4, ThreadID: 3, Process: server(3)},
				)},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildProfiles(scope, tt.reports...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, decode(t, p))
			assertDictionaryDeduplicated(t, p.Dictionary())
			assertRoundTrip(t, p)
		})
	}
}

func TestBuildProfilesSharesDictionaryAcrossProcesses(t *testing.T) {
	s := func(tid uint32, frames []report.Frame) report.Sample {
		return report.Sample{TID: tid, ThreadName: "worker", Frames: frames, Value: 1}
	}
	p, err := BuildProfiles(Scope{Name: "s"}, cpu(
		process(1, map[string]any{"host.name": "node-1"}, s(1, hotStack()), s(2, coldStack())),
		process(2, map[string]any{"host.name": "node-1"}, s(3, hotStack()), s(3, coldStack())),
	))
	require.NoError(t, err)
	require.Equal(t, 1, p.ResourceProfiles().Len(), "host processes share a resource")
	require.Equal(t, 4, p.SampleCount())

	dict := p.Dictionary()
	assertDictionaryDeduplicated(t, dict)
	// 6 functions + zero entry; 3 mappings + zero entry.
	assert.Equal(t, 7, dict.FunctionTable().Len())
	assert.Equal(t, 4, dict.MappingTable().Len())
	// Locations: kernel, write, inner+hot, main, cold + zero entry.
	assert.Equal(t, 6, dict.LocationTable().Len())
	// Stacks: hot, cold + zero entry.
	assert.Equal(t, 3, dict.StackTable().Len())
	// Both processes point at the same stacks.
	idx := func(s int) int32 {
		return p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(s).StackIndex()
	}
	assert.Equal(t, idx(0), idx(2))
	assert.Equal(t, idx(1), idx(3))

	// Mapping build ids are mapping attributes.
	var appMapping pprofile.Mapping
	for _, m := range dict.MappingTable().All() {
		if dict.StringTable().At(int(m.FilenameStrindex())) == "/app/server" {
			appMapping = m
		}
	}
	attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), appMapping, dict)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{attrkey.BuildIDGNU: "abcdef", attrkey.BuildIDGo: "go-build-id"}, attrs.AsRaw())
	assert.Equal(t, uint64(0x400000), appMapping.MemoryStart())
	assert.Equal(t, uint64(0x800000), appMapping.MemoryLimit())
}

func TestBuildProfilesErrors(t *testing.T) {
	_, err := BuildProfiles(Scope{}, cpu(process(1, map[string]any{"bad": struct{}{}},
		report.Sample{TID: 1, Frames: coldStack(), Value: 1})))
	require.ErrorContains(t, err, `process 1: attribute "bad"`)

	_, err = BuildProfiles(Scope{}, cpu(process(1, map[string]any{"container.id": "c", "k8s.bad": struct{}{}},
		report.Sample{TID: 1, Frames: coldStack(), Value: 1})))
	require.ErrorContains(t, err, `resource container:c: attribute "k8s.bad"`)

	_, err = BuildProfiles(Scope{}, cpu(process(1, map[string]any{"big": uint64(1 << 63)},
		report.Sample{TID: 1, Frames: coldStack(), Value: 1})))
	require.ErrorContains(t, err, "overflows int64")
}

func TestBuildProfilesDistinctIDs(t *testing.T) {
	inContainer := map[string]any{"container.id": "c"}
	p, err := BuildProfiles(Scope{},
		cpu(process(1, nil, report.Sample{TID: 1, Value: 1}), process(2, inContainer, report.Sample{TID: 2, Value: 1})),
		offcpu(process(1, nil, report.Sample{TID: 1, Value: 1})))
	require.NoError(t, err)
	ids := map[pprofile.ProfileID]bool{}
	for _, rp := range p.ResourceProfiles().All() {
		for _, prof := range rp.ScopeProfiles().At(0).Profiles().All() {
			ids[prof.ProfileID()] = true
		}
	}
	assert.Len(t, ids, 3)
}

// assertDictionaryDeduplicated checks that index 0 of every table is the zero
// value and that no table holds the same content twice.
func assertDictionaryDeduplicated(t *testing.T, dict pprofile.ProfilesDictionary) {
	t.Helper()
	require.Positive(t, dict.StringTable().Len())
	assert.Empty(t, dict.StringTable().At(0))
	assert.True(t, dict.FunctionTable().At(0).Equal(pprofile.NewFunction()))
	assert.True(t, dict.MappingTable().At(0).Equal(pprofile.NewMapping()))
	assert.True(t, dict.LocationTable().At(0).Equal(pprofile.NewLocation()))
	assert.True(t, dict.StackTable().At(0).Equal(pprofile.NewStack()))
	assert.True(t, dict.AttributeTable().At(0).Equal(pprofile.NewKeyValueAndUnit()))

	strs := map[string]bool{}
	for _, s := range dict.StringTable().All() {
		assert.False(t, strs[s], "duplicate string %q", s)
		strs[s] = true
	}
	unique := func(name string, n int, eq func(i, j int) bool) {
		for i := range n {
			for j := i + 1; j < n; j++ {
				assert.False(t, eq(i, j), "%s %d and %d are equal", name, i, j)
			}
		}
	}
	fns, maps, locs, stacks, attrs := dict.FunctionTable(), dict.MappingTable(), dict.LocationTable(), dict.StackTable(), dict.AttributeTable()
	unique("function", fns.Len(), func(i, j int) bool { return fns.At(i).Equal(fns.At(j)) })
	unique("mapping", maps.Len(), func(i, j int) bool { return maps.At(i).Equal(maps.At(j)) })
	unique("location", locs.Len(), func(i, j int) bool { return locs.At(i).Equal(locs.At(j)) })
	unique("stack", stacks.Len(), func(i, j int) bool { return stacks.At(i).Equal(stacks.At(j)) })
	unique("attribute", attrs.Len(), func(i, j int) bool { return attrs.At(i).Equal(attrs.At(j)) })
}

// assertRoundTrip marshals p to OTLP protobuf and back and checks nothing
// changed. ProtoMarshaler rewrites the resource attributes of a mutable
// Profiles into string-table references (since v0.162.0), so marshal copies.
func assertRoundTrip(t *testing.T, p pprofile.Profiles) {
	t.Helper()
	marshal := func(p pprofile.Profiles) []byte {
		c := pprofile.NewProfiles()
		p.CopyTo(c)
		var m pprofile.ProtoMarshaler
		b, err := m.MarshalProfiles(c)
		require.NoError(t, err)
		return b
	}
	b1 := marshal(p)
	var u pprofile.ProtoUnmarshaler
	back, err := u.UnmarshalProfiles(b1)
	require.NoError(t, err)
	require.NoError(t, pprofiletest.CompareProfiles(p, back))
	assert.Equal(t, b1, marshal(back))
	assert.Equal(t, decodeNoValidate(p), decodeNoValidate(back))
	assert.Equal(t, FunctionTotals(p), FunctionTotals(back))
}

// decodeNoValidate resolves sample stacks to function names for comparison.
func decodeNoValidate(p pprofile.Profiles) [][]string {
	var out [][]string
	forEachSample(p, func(dict pprofile.ProfilesDictionary, s pprofile.Sample, _ int64) {
		var names []string
		forEachLocation(dict, s, func(loc pprofile.Location) bool {
			for _, l := range loc.Lines().All() {
				names = append(names, functionName(dict, l.FunctionIndex()))
			}
			return true
		})
		out = append(out, names)
	})
	return out
}

func TestBuilderThreadAttributes(t *testing.T) {
	reports := cpu(process(1, nil,
		report.Sample{TID: 2, ThreadName: "worker", Frames: coldStack(), Value: 1},
		report.Sample{TID: 3, Frames: coldStack(), Value: 1}))
	for _, tt := range []struct {
		threads ThreadAttributes
		want    []decodedSample // thread fields only
	}{
		{AllThreadAttributes, []decodedSample{{ThreadID: 2, ThreadName: "worker"}, {ThreadID: 3}}},
		{ThreadAttributes{Name: true}, []decodedSample{{ThreadName: "worker"}, {}}},
		{ThreadAttributes{ID: true}, []decodedSample{{ThreadID: 2}, {ThreadID: 3}}},
		{ThreadAttributes{}, []decodedSample{{}, {}}},
	} {
		p, err := Builder{Threads: tt.threads}.Build(reports)
		require.NoError(t, err)
		var got []decodedSample
		for _, s := range decode(t, p)[0].Profiles[0].Samples {
			got = append(got, decodedSample{ThreadID: s.ThreadID, ThreadName: s.ThreadName})
		}
		assert.Equal(t, tt.want, got, "%+v", tt.threads)
	}
}
