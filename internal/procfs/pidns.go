package procfs

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
