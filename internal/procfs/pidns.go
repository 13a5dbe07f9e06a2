package procfs

import (
	"fmt"
	"os"
	"syscall"
)

// initPIDNamespaceIno is the inode of the initial pid namespace
// (PROC_PID_INIT_INO in include/linux/proc_ns.h).
const initPIDNamespaceIno = 0xEFFFFFFC

// PIDNamespace identifies a pid namespace by the device and inode of its
// nsfs file, as bpf_get_ns_current_pid_tgid wants them. The zero value means
// "the initial namespace": host pids need no translation.
type PIDNamespace struct {
	Dev, Ino uint64
}

// IsZero reports whether ns is the zero value (no translation).
func (ns PIDNamespace) IsZero() bool { return ns == PIDNamespace{} }

// PIDNamespace returns the pid namespace of pid, or the zero value when it
// is the initial one.
func (fs FS) PIDNamespace(pid uint32) (PIDNamespace, error) {
	path := fs.Path(pid, "ns", "pid")
	fi, err := os.Stat(path)
	if err != nil {
		return PIDNamespace{}, fmt.Errorf("pid namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return PIDNamespace{}, fmt.Errorf("pid namespace: no device and inode for %s", path)
	}
	if st.Ino == initPIDNamespaceIno {
		return PIDNamespace{}, nil
	}
	return PIDNamespace{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}
