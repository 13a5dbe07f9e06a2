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
				if got := d.Sub(woke[i]); got < delay {
					t.Errorf("drain %d came %v after its wait returned, want at least %v (announcements gather)", i, got, delay)
				}
			}
		})
	}
}
