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
)

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
	if err == nil || !errors.Is(err, unix.EPERM) {
		return err
	}
	if rerr := Raise(); rerr != nil {
		return fmt.Errorf("%w: this kernel (before Linux 5.11) charges BPF memory to RLIMIT_MEMLOCK, which could not be raised (%v): "+
			"give the collector CAP_SYS_RESOURCE or an unlimited memlock limit (systemd LimitMEMLOCK=infinity, ulimit -l unlimited)", err, rerr)
	}
	return err
}
