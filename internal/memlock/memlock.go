// Package memlock raises RLIMIT_MEMLOCK where the kernel charges BPF memory
// to it (before Linux 5.11; later kernels charge the memory cgroup and need
// nothing), and explains a failed BPF load when it could not.
package memlock

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

var (
	once     sync.Once
	raiseErr error
	// remove is rlimit.RemoveMemlock, replaced in tests.
	remove = rlimit.RemoveMemlock
	// chargesMemlock reports whether the running kernel charges BPF memory
	// to RLIMIT_MEMLOCK (before 5.11), replaced in tests. RemoveMemlock
	// itself cannot tell without CAP_BPF, so its error alone says nothing.
	chargesMemlock = func() bool { return kernelBefore(5, 11) }
)

// kernelBefore reports whether the running kernel is older than major.minor.
func kernelBefore(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var maj, min int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &maj, &min); err != nil {
		return false
	}
	return maj < major || maj == major && min < minor
}

// Raise lifts RLIMIT_MEMLOCK once per process if the kernel charges BPF
// memory to it. It returns why that failed (typically: no
// CAP_SYS_RESOURCE); on newer kernels it does nothing and returns nil.
func Raise() error {
	once.Do(func() { raiseErr = remove() })
	return raiseErr
}

// Explain adds the cause and the remedy to err, a BPF load or map creation
// error, when it is a permission error on a kernel whose RLIMIT_MEMLOCK
// could not be raised. Other errors are returned as they are.
func Explain(err error) error {
	if err == nil || !errors.Is(err, unix.EPERM) || !chargesMemlock() {
		return err
	}
	if rerr := Raise(); rerr != nil {
		return fmt.Errorf("%w: this kernel (before Linux 5.11) charges BPF memory to RLIMIT_MEMLOCK, which could not be raised (%v): "+
			"give the collector CAP_SYS_RESOURCE or an unlimited memlock limit (systemd LimitMEMLOCK=infinity, ulimit -l unlimited)", err, rerr)
	}
	return err
}
