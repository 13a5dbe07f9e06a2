//go:build linux

package capabilities

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Effective returns the calling thread's effective capability set (the same
// for every thread of the collector: it never changes its capabilities).
func Effective() (Set, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	return Set(data[0].Effective) | Set(data[1].Effective)<<32, nil
}
