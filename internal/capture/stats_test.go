package capture

import (
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
