//go:build linux

package kernelcheck

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Check returns an error naming the cause and the fix when the kernel lacks
// what every program of the receiver needs: its BTF, and leave to read
// kernel memory from BPF (lockdown). The kernel's BTF is parsed once per
// process (cilium/ebpf keeps it for the loads that follow).
func Check() error {
	if b, err := os.ReadFile(LockdownFile); err == nil {
		if err := lockdownError(lockdownMode(string(b))); err != nil {
			return err
		}
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrNotExist) {
			return btfError(Release(), err)
		}
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	return nil
}
