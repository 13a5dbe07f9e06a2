// Package clock converts kernel timestamps taken with bpf_ktime_get_ns
// (CLOCK_MONOTONIC) into unix time. The offset between the two clocks is
// shared by every signal (profile times, probe log records), so timestamps
// of different signals line up, and measured again once it is a second old,
// so they follow a step of the wall clock (settimeofday, an NTP step).
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Refresh is how long one measurement of the offset serves.
const Refresh = time.Second

// offsetAt is an offset and the monotonic time it was measured at.
type offsetAt struct{ offset, at int64 }

var (
	current   atomic.Pointer[offsetAt]
	measuring sync.Mutex
	measure   = MeasureOffset // tests replace it
)

// Offset returns the process-wide offset: unix ns = monotonic ns + offset.
// It is measured on first use and again when older than Refresh; when a
// new measurement fails, the last one stands.
func Offset() (int64, error) {
	now := int64(Now())
	if c := current.Load(); c != nil && now-c.at < int64(Refresh) {
		return c.offset, nil
	}
	measuring.Lock()
	defer measuring.Unlock()
	c := current.Load()
	if c != nil && now-c.at < int64(Refresh) {
		return c.offset, nil // measured by another caller meanwhile
	}
	off, err := measure()
	if err != nil {
		if c != nil {
			return c.offset, nil
		}
		return 0, err
	}
	current.Store(&offsetAt{offset: off, at: now})
	return off, nil
}

// toUnix converts a CLOCK_MONOTONIC nanosecond timestamp into unix
// nanoseconds with the shared offset (0 and the error when it cannot be
// measured).
func toUnix(mono uint64) (uint64, error) {
	off, err := Offset()
	if err != nil {
		return 0, err
	}
	return uint64(int64(mono) + off), nil
}

// pick returns the offset of the sample whose two monotonic reads are
// closest together: realtime was read at their midpoint within half the gap.
func pick(samples []sample) int64 {
	best := samples[0]
	for _, s := range samples[1:] {
		if s.mono2-s.mono1 < best.mono2-best.mono1 {
			best = s
		}
	}
	mid := best.mono1 + (best.mono2-best.mono1)/2
	return best.real - mid
}

// sample is CLOCK_MONOTONIC read before and after CLOCK_REALTIME.
type sample struct{ mono1, real, mono2 int64 }

// UnixNanos is toUnix for callers that must have a time: when the offset
// cannot be measured it returns the wall clock now.
func UnixNanos(mono uint64) uint64 {
	ns, err := toUnix(mono)
	if err != nil {
		return uint64(time.Now().UnixNano())
	}
	return ns
}
