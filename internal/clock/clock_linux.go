//go:build linux

package clock

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// tries of three clock reads; the tightest one wins.
const tries = 16

// MeasureOffset measures unix ns - CLOCK_MONOTONIC ns now. Offset caches
// one measurement; use this only to measure again.
func MeasureOffset() (int64, error) {
	samples := make([]sample, 0, tries)
	var m1, r, m2 unix.Timespec
	for range tries {
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1); err != nil {
			return 0, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
		}
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &r); err != nil {
			return 0, fmt.Errorf("read CLOCK_REALTIME: %w", err)
		}
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2); err != nil {
			return 0, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
		}
		samples = append(samples, sample{m1.Nano(), r.Nano(), m2.Nano()})
	}
	return pick(samples), nil
}

// Now returns the current CLOCK_MONOTONIC time in nanoseconds, the clock of
// bpf_ktime_get_ns.
func Now() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
