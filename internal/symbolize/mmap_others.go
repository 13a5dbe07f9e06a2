//go:build !linux

package symbolize

import (
	"io"
	"os"
)

// mapFile reads f into the heap: no mapping on this platform.
func mapFile(f *os.File, size int) (*mappedFile, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return &mappedFile{data: data}, nil
}
