package testutil

import (
	"testing"
	"time"
)

func TestPatient(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{
		{"", 10 * time.Second},
		{"4", 40 * time.Second},
		{"1.5", 15 * time.Second},
		{"0.5", 10 * time.Second},
		{"slow", 10 * time.Second},
	} {
		t.Setenv(PatienceEnv, tc.env)
		if got := Patient(10 * time.Second); got != tc.want {
			t.Errorf("%s=%q: %v, want %v", PatienceEnv, tc.env, got, tc.want)
		}
	}
}
