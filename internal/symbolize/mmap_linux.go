//go:build linux

package symbolize

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only.
func mapFile(f *os.File, size int) (*mappedFile, error) {
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return &mappedFile{data: data, unmap: syscall.Munmap, release: release}, nil
}

// release drops the pages of data from the process's resident set. They
// stay in the page cache: a later access maps them again (a minor fault).
func release(data []byte) {
	_ = syscall.Madvise(data, syscall.MADV_DONTNEED)
}
