package procfs

import (
	"fmt"
	"sync"
	"time"
)

// Deadline bounds calls that may block on a file a process controls: a
// FUSE server the process runs, or a dead network file system, can hold an
// open or a read forever. A call runs on its own goroutine and the caller
// waits at most the timeout. A call that missed its deadline stays in
// flight: another call for the same key is refused (ReasonStuck) instead of
// started, so a stuck file is not tried in a loop, and at most maxInFlight
// calls are in flight in all. A call for a key whose earlier call is still
// within its deadline is refused too (ReasonBusy): the earlier caller gets
// the answer and acts on it.
type Deadline struct {
	timeout     time.Duration
	maxInFlight int

	mu       sync.Mutex
	inflight map[string]bool // key -> its call missed its deadline
}

// NewDeadline returns a Deadline waiting at most timeout per call, with at
// most maxInFlight calls in flight.
func NewDeadline(timeout time.Duration, maxInFlight int) *Deadline {
	return &Deadline{timeout: timeout, maxInFlight: maxInFlight, inflight: make(map[string]bool)}
}

// InFlight returns how many calls have not returned.
func (d *Deadline) InFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.inflight)
}

// Busy says whether a call for key has not returned yet (one that missed
// its deadline): what it works on is still in its hands. Once Busy is
// false, what the call did happened before.
func (d *Deadline) Busy(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.inflight[key]
	return ok
}

func (d *Deadline) start(key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if late, ok := d.inflight[key]; ok {
		if !late {
			return &RefusedError{Path: key, Reason: ReasonBusy, Detail: "another open or read of it is under way"}
		}
		return &RefusedError{Path: key, Reason: ReasonStuck, Detail: "an earlier open or read of it has not returned"}
	}
	if len(d.inflight) >= d.maxInFlight {
		return &RefusedError{Path: key, Reason: ReasonStuck,
			Detail: fmt.Sprintf("%d opens or reads of other files have not returned", len(d.inflight))}
	}
	d.inflight[key] = false
	return nil
}

func (d *Deadline) finish(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inflight, key)
}

// Within runs fn under d for the file key (its path). When fn does not
// return in time the error is a *RefusedError (ReasonTimeout), and what fn
// returns later is handed to discard (to close a file) when fn succeeded.
func Within[T any](d *Deadline, key string, fn func() (T, error), discard func(T)) (T, error) {
	var zero T
	if err := d.start(key); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	var mu sync.Mutex
	abandoned := false
	go func() {
		v, err := fn()
		d.finish(key)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil && discard != nil {
				discard(v)
			}
			return
		}
		ch <- result{v, err}
	}()
	timer := time.NewTimer(d.timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-ch: // it returned just now
		return r.v, r.err
	default:
		abandoned = true
		d.mu.Lock()
		if _, ok := d.inflight[key]; ok {
			d.inflight[key] = true
		}
		d.mu.Unlock()
		return zero, &RefusedError{Path: key, Reason: ReasonTimeout, Detail: fmt.Sprintf("no answer within %v", d.timeout)}
	}
}
