package pdata

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func TestTotals(t *testing.T) {
	recursive := []report.Frame{
		{Address: 0x403000, Function: "main.fib", Type: report.FrameGo, Mapping: appMap},
		{Address: 0x403010, Function: "main.fib", Type: report.FrameGo, Mapping: appMap},
		{Address: 0x402000, Function: "main.main", Type: report.FrameGo, Mapping: appMap},
	}
	unsymbolizedLeaf := []report.Frame{
		{Address: 0x7f0000031234, Type: report.FrameNative, Mapping: libcMap},
		{Address: 0x402000, Function: "main.main", Type: report.FrameGo, Mapping: appMap},
	}
	sample := func(frames []report.Frame, v int64) report.Sample {
		return report.Sample{TID: 1, Frames: frames, Value: v}
	}

	tests := []struct {
		name      string
		reports   []report.Profile
		functions map[string]int64
		leaves    map[string]int64
		total     int64
	}{
		{name: "empty", functions: map[string]int64{}, leaves: map[string]int64{}},
		{
			name: "hot and cold across processes",
			reports: []report.Profile{cpu(
				process(1, nil, sample(hotStack(), 50), sample(coldStack(), 25)),
				process(2, nil, sample(hotStack(), 25)),
			)},
			functions: map[string]int64{
				"do_syscall_64": 75, "write": 75, "main.inner": 75, "main.hot": 75, "main.main": 100, "main.cold": 25,
			},
			leaves: map[string]int64{"do_syscall_64": 75, "main.cold": 25},
			total:  100,
		},
		{
			name:      "recursion counted once per sample",
			reports:   []report.Profile{cpu(process(1, nil, sample(recursive, 3)))},
			functions: map[string]int64{"main.fib": 3, "main.main": 3},
			leaves:    map[string]int64{"main.fib": 3},
			total:     3,
		},
		{
			name: "inlined callee is the leaf; unsymbolized leaf not counted",
			reports: []report.Profile{cpu(process(1, nil,
				sample(hotStack()[2:], 4), sample(unsymbolizedLeaf, 6), sample(nil, 1)))},
			functions: map[string]int64{"main.inner": 4, "main.hot": 4, "main.main": 10},
			leaves:    map[string]int64{"main.inner": 4},
			total:     11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildProfiles(Scope{}, tt.reports...)
			require.NoError(t, err)
			assert.Equal(t, tt.functions, FunctionTotals(p))
			assert.Equal(t, tt.leaves, LeafTotals(p))
			assert.Equal(t, tt.total, Total(p))
		})
	}
}

func TestTotalsToleratesBadIndices(t *testing.T) {
	p := pprofile.NewProfiles()
	s := p.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty().Samples().AppendEmpty()
	s.Values().Append(1)
	s.SetStackIndex(5) // no stack table at all
	assert.Empty(t, FunctionTotals(p))
	assert.Empty(t, LeafTotals(p))
	assert.Equal(t, int64(1), Total(p))
}

func TestStacks(t *testing.T) {
	unsymbolizedLeaf := []report.Frame{
		{Address: 0x7f0000031234, Type: report.FrameNative, Mapping: libcMap},
		{Address: 0x402000, Function: "main.main", Type: report.FrameGo, Mapping: appMap},
	}
	p, err := BuildProfiles(Scope{}, cpu(process(1, nil,
		report.Sample{TID: 1, Frames: hotStack()[2:], Value: 4},
		report.Sample{TID: 1, Frames: unsymbolizedLeaf, Value: 6})))
	require.NoError(t, err)
	got := Stacks(p)
	require.Len(t, got, 2)
	byValue := map[int64][]string{}
	for _, s := range got {
		byValue[s.Value] = s.Functions
	}
	assert.Equal(t, []string{"main.inner", "main.hot", "main.main"}, byValue[4])
	assert.Equal(t, []string{"", "main.main"}, byValue[6])
}

func TestOfType(t *testing.T) {
	p, err := BuildProfiles(Scope{},
		cpu(process(1, nil, report.Sample{TID: 1, Frames: hotStack(), Value: 4})),
		offcpu(process(1, nil, report.Sample{TID: 1, Frames: coldStack(), Value: 7000})))
	require.NoError(t, err)
	for _, tt := range []struct {
		typ   string
		total int64
	}{{"samples", 4}, {"off_cpu", 7000}, {"probe_duration", 0}} {
		t.Run(tt.typ, func(t *testing.T) {
			assert.Equal(t, tt.total, Total(OfType(p, tt.typ)))
		})
	}
	assert.Equal(t, int64(7004), Total(p), "p itself is left whole")
}
