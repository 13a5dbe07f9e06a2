package main

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// The startup figures of a workload: the end of its first window with a
// whole stack, the end of the first window from which every window is ≥
// 90% whole (a dip later moves it), and its share over all windows;
// another process's samples and windows without the workload count for
// nothing.
func TestStartupFigures(t *testing.T) {
	started := time.Unix(100, 0)
	whole := &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: "fib"}}}}
	native := &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: "_PyEval_EvalFrameDefault"}}}}
	window := func(startMs int64, samples ...*profile.Sample) *profile.Profile {
		return &profile.Profile{TimeNanos: started.Add(time.Duration(startMs) * time.Millisecond).UnixNano(),
			DurationNanos: int64(time.Second), Sample: samples}
	}
	sample := func(pid, n int64, loc *profile.Location) *profile.Sample {
		return &profile.Sample{Value: []int64{n}, Location: []*profile.Location{loc}, NumLabel: map[string][]int64{"pid": {pid}}}
	}
	spec := startupSpec{name: "py", chain: []string{"fib"}}
	tests := []struct {
		name          string
		profs         []*profile.Profile
		first, ninety time.Duration
		whole         chainCount
	}{
		{"named from the second window", []*profile.Profile{
			window(-500, sample(7, 50, native), sample(8, 90, whole)),
			window(500, sample(7, 10, native), sample(7, 90, whole)),
			window(1500, sample(7, 100, whole)),
		}, 1500 * time.Millisecond, 1500 * time.Millisecond, chainCount{190, 250}},
		{"a dip later", []*profile.Profile{
			window(0, sample(7, 95, whole), sample(7, 5, native)),
			window(1000, sample(7, 50, whole), sample(7, 50, native)),
			window(2000),
			window(3000, sample(7, 100, whole)),
		}, time.Second, 4 * time.Second, chainCount{245, 300}},
		{"never", []*profile.Profile{window(0, sample(7, 9, native))}, -1, -1, chainCount{0, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startupFigures(spec, 7, started, tt.profs)
			if r.first != tt.first || r.ninety != tt.ninety || r.whole != tt.whole {
				t.Errorf("first %v, ninety %v, whole %+v; want %v, %v, %+v", r.first, r.ninety, r.whole, tt.first, tt.ninety, tt.whole)
			}
		})
	}
}
