package main

import "testing"

func TestGoVersionParts(t *testing.T) {
	for _, tc := range []struct {
		v, minor string
		patch    int
	}{
		{"go1.27.4", "go1.27", 4},
		{"go1.23.12", "go1.23", 12},
		{"go1.21", "go1.21", -1},
		{"go1.27rc1", "go1.27rc1", -1},
		{"go1.26.0rc2", "go1.26", -1},
	} {
		if got := goMinor(tc.v); got != tc.minor {
			t.Errorf("goMinor(%q) = %q, want %q", tc.v, got, tc.minor)
		}
		if got := goPatch(tc.v); got != tc.patch {
			t.Errorf("goPatch(%q) = %d, want %d", tc.v, got, tc.patch)
		}
	}
}
