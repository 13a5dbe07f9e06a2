package capture

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// Adding stats joins the waits for tables of both, in order, and leaves
// the first's slice as it was (two sources' stats are added to one
// window's without one changing the other's).
func TestStatsAddJoinsTablesReady(t *testing.T) {
	first := Stats{TablesReady: make([]time.Duration, 1, 4)}
	first.TablesReady[0] = time.Second
	second := Stats{TablesReady: []time.Duration{2 * time.Second}}
	third := Stats{TablesReady: []time.Duration{3 * time.Second}}
	a, b := first.Add(second), first.Add(third)
	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(a.TablesReady, want) {
		t.Errorf("first + second = %v, want %v", a.TablesReady, want)
	}
	if want := []time.Duration{time.Second, 3 * time.Second}; !slices.Equal(b.TablesReady, want) {
		t.Errorf("first + third = %v, want %v", b.TablesReady, want)
	}
	if len(first.TablesReady) != 1 {
		t.Errorf("first changed: %v", first.TablesReady)
	}
}

// Adding stats sums the walks of each runtime walked apart into its own
// field and keeps the later window's process gauges.
func TestStatsAddRuntimeWalks(t *testing.T) {
	walks := func(root, noThread, frames, lost uint64) RuntimeWalks {
		w := RuntimeWalks{Frames: frames, StackLost: lost}
		w.Ends[RuntimeRoot], w.Ends[RuntimeNoThread] = root, noThread
		return w
	}
	tests := []struct {
		name      string
		field     func(*Stats) *RuntimeWalks
		processes func(*Stats) *uint64
	}{
		{name: "ruby", field: func(s *Stats) *RuntimeWalks { return &s.RubyWalks }, processes: func(s *Stats) *uint64 { return &s.RubyProcesses }},
		{name: "php", field: func(s *Stats) *RuntimeWalks { return &s.PHPWalks }, processes: func(s *Stats) *uint64 { return &s.PHPProcesses }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b Stats
			*tt.field(&a), *tt.processes(&a) = walks(5, 1, 70, 2), 3
			*tt.field(&b), *tt.processes(&b) = walks(4, 0, 30, 1), 2
			got := a.Add(b)
			want := Stats{}
			*tt.field(&want), *tt.processes(&want) = walks(9, 1, 100, 3), 2
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}
