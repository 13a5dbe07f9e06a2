// Package clock converts kernel timestamps taken with bpf_ktime_get_ns
// (CLOCK_MONOTONIC) into unix time. The offset between the two clocks is
// measured once per process and shared by every signal (profile sample
// times, probe log records), so timestamps of different signals line up.
package clock

import (
	"sync"
	"time"
)

var shared = sync.OnceValues(MeasureOffset)

// Offset returns the process-wide offset: unix ns = monotonic ns + offset.
// It is measured on first use.
func Offset() (int64, error) { return shared() }

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

// Wall is the receiver's wall clock: the monotonic clock now with the shared
// offset, so profile times and probe log records line up.
func Wall() time.Time { return time.Unix(0, int64(UnixNanos(Now()))) }
