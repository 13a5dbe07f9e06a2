package golabels

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// labelSetter is the function every way of setting a goroutine's labels
// goes through (pprof.Do, SetGoroutineLabels): the runtime's, linked into
// runtime/pprof. The function name table of .gopclntab names it where it
// is linked in, inlined or not (inlined calls keep their callee's name for
// tracebacks), in stripped executables too.
var labelSetter = []byte("runtime/pprof.runtime_setProfLabel\x00")

// setsLabels says whether executable f may set goroutine labels: false
// when its .gopclntab, read whole, does not name labelSetter. Without
// such a section, or when it cannot be read, it says true: read them.
func setsLabels(f *elf.File) bool {
	s := f.Section(".gopclntab")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return true
	}
	found, err := contains(s.Open(), labelSetter)
	return found || err != nil
}

// contains streams r looking for needle, a chunk at a time.
func contains(r io.Reader, needle []byte) (bool, error) {
	const chunk = 1 << 20
	buf := make([]byte, len(needle)-1+chunk)
	kept := 0 // the end of the last chunk, which a match may start in
	for {
		n, err := io.ReadFull(r, buf[kept:])
		if bytes.Contains(buf[:kept+n], needle) {
			return true, nil
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("read .gopclntab: %w", err)
		}
		kept = copy(buf, buf[kept+n-(len(needle)-1):kept+n])
	}
}
