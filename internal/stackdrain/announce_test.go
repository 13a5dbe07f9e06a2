package stackdrain

import (
	"errors"
	"os"
	"testing"
	"time"
)

// gather drains once per successful wait, delay after it, and stops at the
// first failed wait or when stop closes during the delay.
func TestGather(t *testing.T) {
	const delay = 20 * time.Millisecond
	tests := []struct {
		name       string
		waits      []error // results of the successive waits
		stopAfter  int     // close stop during the delay after this many waits (0: never)
		wantDrains int
	}{
		{name: "closed at once", waits: []error{os.ErrClosed}},
		{name: "one batch", waits: []error{nil, os.ErrClosed}, wantDrains: 1},
		{name: "three batches", waits: []error{nil, nil, nil, os.ErrClosed}, wantDrains: 3},
		{name: "stopped while gathering", waits: []error{nil, nil, nil}, stopAfter: 2, wantDrains: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop := make(chan struct{})
			var woke []time.Time
			var drains []time.Time
			wait := func() error {
				if len(woke) == len(tt.waits) {
					return errors.New("waited once too often")
				}
				err := tt.waits[len(woke)]
				woke = append(woke, time.Now())
				if len(woke) == tt.stopAfter {
					close(stop)
				}
				return err
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				gather(wait, func() { drains = append(drains, time.Now()) }, stop, delay)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("gather did not return")
			}
			if len(drains) != tt.wantDrains {
				t.Fatalf("%d drains, want %d", len(drains), tt.wantDrains)
			}
			for i, d := range drains {
				if d.Before(woke[i]) {
					t.Errorf("drain %d came before its wait returned", i)
				}
			}
		})
	}
}

func TestUntilBoundary(t *testing.T) {
	const delay = 50 * time.Millisecond
	base := time.Unix(1700000000, 0) // a multiple of delay
	tests := []struct {
		after time.Duration // now, after base
		want  time.Duration
	}{
		{after: 0, want: delay}, // on a boundary: the next one
		{after: time.Millisecond, want: 49 * time.Millisecond},
		{after: 49 * time.Millisecond, want: time.Millisecond},
		{after: 120 * time.Millisecond, want: 30 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := untilBoundary(base.Add(tt.after), delay); got != tt.want {
			t.Errorf("untilBoundary(base+%v) = %v, want %v", tt.after, got, tt.want)
		}
	}
}
