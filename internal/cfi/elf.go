package cfi

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// ehSource is where a file's .eh_frame is: its bytes, and the offsets of its
// FDEs when they come from the .eh_frame_hdr search table.
type ehSource struct {
	sec        *frameSection // nil: no .eh_frame
	fdeOffsets []int
	// fromSegment: sec runs from .eh_frame to the end of its segment, so a
	// linear walk must stop at the zero terminator.
	fromSegment bool
}

// ehFrame finds .eh_frame: by section header or, in a file without section
// headers, through PT_GNU_EH_FRAME. (A separate debug file has section
// headers, a NOBITS .eh_frame and a PT_GNU_EH_FRAME pointing at nothing.)
func ehFrame(f *elf.File) (ehSource, error) {
	if len(f.Sections) > 0 {
		s := f.Section(".eh_frame")
		if s == nil || s.Type == elf.SHT_NOBITS {
			return ehSource{}, nil
		}
		data, err := readSection(s)
		if err != nil {
			return ehSource{}, err
		}
		return ehSource{sec: &frameSection{data: data, addr: s.Addr}}, nil
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			return ehFrameFromHeader(f, p)
		}
	}
	return ehSource{}, nil
}

// ehFrameFromHeader reads .eh_frame_hdr (the segment hdr): the address of
// .eh_frame and the table of its FDEs, sorted by address for the runtime's
// binary search.
func ehFrameFromHeader(f *elf.File, hdr *elf.Prog) (ehSource, error) {
	data, err := readSegment(hdr, 0, hdr.Filesz)
	if err != nil {
		return ehSource{}, fmt.Errorf(".eh_frame_hdr: %w", err)
	}
	r := reader{buf: data}
	version, ptrEnc, countEnc, tableEnc := r.u8(), r.u8(), r.u8(), r.u8()
	if r.bad || version != 1 {
		return ehSource{}, fmt.Errorf(".eh_frame_hdr: version %d", version)
	}
	base := hdr.Vaddr
	ehAddr, err := r.pointer(ptrEnc, base+uint64(r.off), base, 8)
	if err != nil {
		return ehSource{}, fmt.Errorf(".eh_frame_hdr: .eh_frame address: %w", err)
	}
	load := loadSegment(f, ehAddr)
	if load == nil {
		return ehSource{}, fmt.Errorf(".eh_frame at %#x is in no segment", ehAddr)
	}
	size := min(load.Vaddr+load.Filesz-ehAddr, maxSectionSize)
	ehData, err := readSegment(load, ehAddr-load.Vaddr, size)
	if err != nil {
		return ehSource{}, err
	}
	src := ehSource{sec: &frameSection{data: ehData, addr: ehAddr}, fromSegment: true}
	if countEnc == peOmit || tableEnc == peOmit {
		return src, nil
	}
	count, err := r.pointer(countEnc, base+uint64(r.off), base, 8)
	if err != nil {
		return src, nil // no usable table: walk .eh_frame instead
	}
	// Each entry takes at least two bytes: this bounds count.
	count = min(count, uint64(r.left()/2))
	offsets := make([]int, 0, count)
	for range count {
		if _, err := r.pointer(tableEnc, base+uint64(r.off), base, 8); err != nil {
			return src, nil
		}
		fde, err := r.pointer(tableEnc, base+uint64(r.off), base, 8)
		if err != nil {
			return src, nil
		}
		if fde >= ehAddr && fde-ehAddr < uint64(len(ehData)) {
			offsets = append(offsets, int(fde-ehAddr))
		}
	}
	src.fdeOffsets = offsets
	return src, nil
}

// loadSegment returns the PT_LOAD segment whose file bytes hold addr.
func loadSegment(f *elf.File, addr uint64) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return p
		}
	}
	return nil
}

// executableRanges returns the address ranges of the executable segments
// (nil for a file without segments, such as an object file).
func executableRanges(f *elf.File) []addrRange {
	var out []addrRange
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr+p.Memsz >= p.Vaddr {
			out = append(out, addrRange{lo: p.Vaddr, hi: p.Vaddr + p.Memsz})
		}
	}
	return out
}

var errTooLarge = errors.New("too large")

// readSection returns the (uncompressed) bytes of s, up to maxSectionSize.
func readSection(s *elf.Section) (data []byte, err error) {
	if s.Size > maxSectionSize {
		return nil, fmt.Errorf("%d bytes: %w", s.Size, errTooLarge)
	}
	defer recoverELF(&err)
	return s.Data()
}

// readSegment returns size bytes at offset off of segment p.
func readSegment(p *elf.Prog, off, size uint64) (data []byte, err error) {
	if size > maxSectionSize {
		return nil, fmt.Errorf("segment of %d bytes: %w", size, errTooLarge)
	}
	defer recoverELF(&err)
	data = make([]byte, size)
	n, err := p.ReadAt(data, int64(off))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}

// recoverELF turns a panic of debug/elf on a malformed file into an error.
func recoverELF(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("malformed ELF: %v", r)
	}
}
