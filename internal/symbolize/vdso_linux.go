//go:build linux

package symbolize

import (
	"errors"
	"fmt"
	"os"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// readOwnVDSO returns the bytes of the collector's own [vdso] mapping.
func readOwnVDSO() ([]byte, error) {
	pid := uint32(os.Getpid()) //nolint:gosec // a pid
	maps, err := procfs.Default.Maps(pid)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if !isVDSO(m) {
			continue
		}
		if m.End <= m.Start || m.End-m.Start > maxVDSOBytes {
			return nil, fmt.Errorf("[vdso] mapping of %#x-%#x", m.Start, m.End)
		}
		mem, err := os.Open(procfs.Default.Path(pid, "mem"))
		if err != nil {
			return nil, err
		}
		defer mem.Close()
		data := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(data, int64(m.Start)); err != nil { //nolint:gosec // a user address, below 2^63
			return nil, err
		}
		return data, nil
	}
	return nil, errors.New("no [vdso] mapping")
}
