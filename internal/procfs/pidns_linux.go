//go:build linux

package procfs

import (
	"fmt"
	"os"
	"syscall"
)

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
