package main

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// The startup figures of a workload: the end of its first window with a
// whole stack, and the share of its working thread's samples whole in the
// windows ending within startupEarly of its exec and after; another
// thread's or process's samples count for nothing.
func TestStartupFigures(t *testing.T) {
	started := time.Unix(100, 0)
	whole := &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: "fib"}}}}
	native := &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: "_PyEval_EvalFrameDefault"}}}}
	window := func(startMs int64, samples ...*profile.Sample) *profile.Profile {
		return &profile.Profile{TimeNanos: started.Add(time.Duration(startMs) * time.Millisecond).UnixNano(),
			DurationNanos: int64(time.Second), Sample: samples}
	}
	sample := func(pid, tid, n int64, loc *profile.Location) *profile.Sample {
		return &profile.Sample{Value: []int64{n}, Location: []*profile.Location{loc}, NumLabel: map[string][]int64{"pid": {pid}, "tid": {tid}}}
	}
	spec := startupSpec{name: "py", chain: []string{"fib"}, thread: mainThread}
	tests := []struct {
		name         string
		profs        []*profile.Profile
		first        time.Duration
		early, later chainCount
	}{
		{"named from the second window", []*profile.Profile{
			window(-500, sample(7, 7, 50, native), sample(8, 8, 90, whole)),
			window(500, sample(7, 7, 10, native), sample(7, 7, 90, whole), sample(7, 9, 40, native)),
			window(2500, sample(7, 7, 100, whole)),
		}, 1500 * time.Millisecond, chainCount{90, 150}, chainCount{100, 100}},
		{"never", []*profile.Profile{window(0, sample(7, 7, 9, native))}, -1, chainCount{0, 9}, chainCount{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startupFigures(spec, 7, started, tt.profs)
			if r.first != tt.first || r.early != tt.early || r.later != tt.later {
				t.Errorf("first %v, early %+v, later %+v; want %v, %+v, %+v", r.first, r.early, r.later, tt.first, tt.early, tt.later)
			}
		})
	}
}
