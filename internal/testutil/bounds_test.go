package testutil

import "testing"

func TestOutsideBy(t *testing.T) {
	for _, c := range []struct {
		name           string
		got, low, high float64
		want           float64
	}{
		{"inside", 105, 100, 110, 0},
		{"on the lower bound", 100, 100, 110, 0},
		{"on the upper bound", 110, 100, 110, 0},
		{"above", 121, 100, 110, 0.1},
		{"below", 90, 100, 110, -0.1},
		{"empty range, equal", 100, 100, 100, 0},
		{"empty range, above", 103, 100, 100, 0.03},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := OutsideBy(c.got, c.low, c.high); got < c.want-1e-12 || got > c.want+1e-12 {
				t.Errorf("OutsideBy(%v, %v, %v) = %v, want %v", c.got, c.low, c.high, got, c.want)
			}
		})
	}
}
