package symbolize

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
)

// mappedFile is the content of a file kept outside the Go heap: on unix a
// read-only mapping, whose pages are loaded only where touched, shared with
// the page cache and evictable; elsewhere a heap copy.
//
// Every access to data after parsing must run inside withFaultPanic: when
// the file is truncated while mapped, touching a page past the new end
// raises SIGBUS, which debug.SetPanicOnFault turns into a recoverable panic
// (the frame is then left unresolved) instead of a crash. Strings taken from
// data are always copies, so nothing refers to the mapping after close.
type mappedFile struct {
	data    []byte
	unmap   func([]byte) error
	release func([]byte)
	closed  bool
}

// maxMappedFile bounds the size of a file that is mapped.
const maxMappedFile = 4 << 30

// mapOpenFile maps the regular file f, opened by the caller (through
// procfs.OpenMappedFile for a file of a process). f may be closed after
// return: the mapping keeps the file alive.
func mapOpenFile(f *os.File) (*mappedFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	size := st.Size()
	if size == 0 {
		return nil, errors.New("empty file")
	}
	if size > maxMappedFile {
		return nil, fmt.Errorf("file too large (%d bytes)", size)
	}
	return mapFile(f, int(size))
}

// releasePages drops the pages of the file from the resident set after a
// scan of whole tables (symbols at open, the sorting of function symbols);
// lookups then map again only the few pages they touch.
func (m *mappedFile) releasePages() {
	if m != nil && !m.closed && m.release != nil {
		m.release(m.data)
	}
}

// close releases the mapping. It is idempotent.
func (m *mappedFile) close() error {
	if m == nil || m.closed {
		return nil
	}
	m.closed = true
	data := m.data
	m.data = nil
	if m.unmap == nil {
		return nil
	}
	return m.unmap(data)
}

// withFaultPanic runs fn with memory faults (SIGBUS on a truncated mapped
// file) turned into panics, and returns the panic value, if any, as an error.
func withFaultPanic(fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	fn()
	return nil
}
