package symbolize

import (
	"debug/elf"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// maxExecutableString bounds ReadExecutableString's reads (a label's key
// or value is at most 255 bytes).
const maxExecutableString = 255

// ReadExecutableString returns the n bytes at addr of process pid when
// they are in a segment of its Go executable loaded without write
// permission (so the same in memory as in the file), read from the
// file (the Go labels the samplers stored by reference: the string
// literals of the code that set them). The file must be one the process
// maps executable, a Go binary; the bytes must be within the segment's
// file bytes. exited: only what was read of the process before is used.
func (s *Symbolizer) ReadExecutableString(pid uint32, addr uint64, n int, exited bool) ([]byte, bool) {
	if n <= 0 || n > maxExecutableString || addr+uint64(n) < addr {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs.get(pid)
	if !ok && exited {
		return nil, false
	}
	if !ok {
		p = s.process(pid)
	}
	for _, m := range p.maps {
		if !m.FileBacked() {
			continue
		}
		ef := s.cachedOrOpenELF(pid, m, !exited)
		if ef == nil || ef.gotab == nil && ef.buildIDGo == "" {
			continue
		}
		// Only the Go executable: the first Go file mapped executable.
		return ef.readOnlyBytes(m, addr, n)
	}
	return nil, false
}

// cachedOrOpenELF returns the parsed file of mapping m, opening it only
// when live.
func (s *Symbolizer) cachedOrOpenELF(pid uint32, m procfs.Map, live bool) *elfFile {
	if live {
		ef, _ := s.elf(pid, m)
		return ef
	}
	if e, ok := s.files.get(keyOf(m)); ok {
		return e.ef
	}
	return nil
}

// readOnlyBytes returns the n bytes at addr of a process that maps ef at
// m, when they are within the file bytes of a segment loaded without write
// permission (read-only, or with the code when linked externally).
func (ef *elfFile) readOnlyBytes(m procfs.Map, addr uint64, n int) ([]byte, bool) {
	base, ok := ef.vaddr(m.Offset) // the address in the file of m.Start
	if !ok || ef.mapped == nil {
		return nil, false
	}
	vaddr := addr - m.Start + base // wraps back for a file loaded below its addresses
	for _, p := range ef.loads {
		if p.Flags&elf.PF_W != 0 || vaddr < p.Vaddr || vaddr+uint64(n) > p.Vaddr+p.Filesz || vaddr+uint64(n) < vaddr {
			continue
		}
		off := p.Off + (vaddr - p.Vaddr)
		data := ef.mapped.data
		if off > uint64(len(data)) || uint64(n) > uint64(len(data))-off {
			return nil, false
		}
		out := make([]byte, n)
		if err := withFaultPanic(func() { copy(out, data[off:]) }); err != nil {
			return nil, false // the file was truncated under its mapping
		}
		return out, true
	}
	return nil, false
}
