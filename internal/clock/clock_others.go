//go:build !linux

package clock

import "errors"

// MeasureOffset returns an error: kernel timestamps exist only on Linux.
func MeasureOffset() (int64, error) {
	return 0, errors.New("kernel monotonic clock offset is only available on Linux")
}

// Now returns 0 outside Linux.
func Now() uint64 { return 0 }
