package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// newELF parses the headers of the ELF file data with debug/elf. When the
// section header table is unusable (a corrupt e_shoff, e_shnum or
// e_shentsize), it parses the file again as if it had none; noSections
// says so, and the symbols then come from the dynamic segment
// (dynamicSymbols).
func newELF(data []byte) (f *elf.File, noSections bool, err error) {
	f, err = elf.NewFile(bytes.NewReader(data))
	if err == nil {
		return f, false, nil
	}
	hdr, ok := withoutSectionHeaders(data)
	if !ok {
		return nil, false, err
	}
	f2, err2 := elf.NewFile(hdr)
	if err2 != nil {
		return nil, false, err
	}
	return f2, true, nil
}

// withoutSectionHeaders returns data with e_shoff, e_shentsize, e_shnum and
// e_shstrndx of its ELF header zeroed, without copying data.
func withoutSectionHeaders(data []byte) (io.ReaderAt, bool) {
	if len(data) < elf.EI_NIDENT || string(data[:4]) != elf.ELFMAG {
		return nil, false
	}
	// Offsets of e_shoff and of e_shentsize..e_shstrndx, and header size.
	var shoff, shoffLen, shent, size int
	switch elf.Class(data[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		shoff, shoffLen, shent, size = 0x28, 8, 0x3a, 64
	case elf.ELFCLASS32:
		shoff, shoffLen, shent, size = 0x20, 4, 0x2e, 52
	default:
		return nil, false
	}
	if len(data) < size {
		return nil, false
	}
	hdr := bytes.Clone(data[:size])
	clear(hdr[shoff : shoff+shoffLen])
	clear(hdr[shent : shent+6])
	return patchedReader{data: data, hdr: hdr}, true
}

// patchedReader reads data with its first len(hdr) bytes replaced by hdr.
type patchedReader struct{ data, hdr []byte }

func (p patchedReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := bytes.NewReader(p.data).ReadAt(b, off)
	if off < int64(len(p.hdr)) {
		copy(b[:n], p.hdr[off:])
	}
	return n, err
}

// Bounds on what is read through the dynamic segment.
const (
	maxDynamicSize = 1 << 20 // bytes of PT_DYNAMIC
	maxGNUBuckets  = 1 << 24
)

// dynamicSymbols returns the dynamic symbol table of f, found through the
// program headers as the dynamic loader finds it: PT_DYNAMIC gives
// DT_SYMTAB, DT_STRTAB and DT_STRSZ, and the symbol count comes from
// DT_HASH (nchain) or DT_GNU_HASH (the end of the longest hash chain).
// Every count and offset read from the file is checked against data.
func dynamicSymbols(f *elf.File, data []byte) (rawSymbols, bool, error) {
	var dyn *elf.Prog
	var loads []elf.ProgHeader
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_DYNAMIC:
			dyn = p
		case elf.PT_LOAD:
			loads = append(loads, p.ProgHeader)
		}
	}
	if dyn == nil {
		return rawSymbols{}, false, nil
	}
	dynData, ok := fileRange(data, dyn.Off, min(dyn.Filesz, maxDynamicSize))
	if !ok {
		return rawSymbols{}, false, errors.New("PT_DYNAMIC out of bounds")
	}
	entSize, dynEnt := elf.Sym64Size, 16
	if f.Class == elf.ELFCLASS32 {
		entSize, dynEnt = elf.Sym32Size, 8
	}
	bo := f.ByteOrder
	tags := map[elf.DynTag]uint64{}
	for off := 0; off+dynEnt <= len(dynData); off += dynEnt {
		var tag elf.DynTag
		var val uint64
		if f.Class == elf.ELFCLASS32 {
			tag, val = elf.DynTag(int32(bo.Uint32(dynData[off:]))), uint64(bo.Uint32(dynData[off+4:]))
		} else {
			tag, val = elf.DynTag(int64(bo.Uint64(dynData[off:]))), bo.Uint64(dynData[off+8:])
		}
		if tag == elf.DT_NULL {
			break
		}
		if _, seen := tags[tag]; !seen {
			tags[tag] = val
		}
	}
	offset := func(tag elf.DynTag) (uint64, bool) {
		v, ok := tags[tag]
		if !ok {
			return 0, false
		}
		return fileOffset(loads, v)
	}
	symOff, ok1 := offset(elf.DT_SYMTAB)
	strOff, ok2 := offset(elf.DT_STRTAB)
	strSize, ok3 := tags[elf.DT_STRSZ]
	if !ok1 || !ok2 || !ok3 {
		return rawSymbols{}, false, errors.New("dynamic segment without DT_SYMTAB, DT_STRTAB or DT_STRSZ")
	}
	if e, ok := tags[elf.DT_SYMENT]; ok && e != uint64(entSize) {
		return rawSymbols{}, false, fmt.Errorf("DT_SYMENT %d, want %d", e, entSize)
	}
	strtab, ok := fileRange(data, strOff, strSize)
	if !ok {
		return rawSymbols{}, false, errors.New("DT_STRTAB out of bounds")
	}
	var count uint64
	var err error
	if off, ok := offset(elf.DT_GNU_HASH); ok {
		count, err = gnuHashCount(data, off, f.Class, bo)
	} else if off, ok := offset(elf.DT_HASH); ok {
		count, err = sysvHashCount(data, off, bo)
	} else {
		err = errors.New("dynamic segment without DT_HASH or DT_GNU_HASH")
	}
	if err != nil {
		return rawSymbols{}, false, err
	}
	if symOff > uint64(len(data)) || count > (uint64(len(data))-symOff)/uint64(entSize) {
		return rawSymbols{}, false, fmt.Errorf("%d dynamic symbols do not fit in the file", count)
	}
	if count < 2 {
		return rawSymbols{}, false, nil // the null symbol only
	}
	syms := data[symOff+uint64(entSize) : symOff+count*uint64(entSize)]
	le64 := f.Class == elf.ELFCLASS64 && bo == binary.LittleEndian
	return rawSymbols{data: syms, strtab: strtab, entSize: entSize, typ: elf.SHT_DYNSYM, class: f.Class, bo: bo, le64: le64}, true, nil
}

// fileRange returns data[off:off+n], or false when it is out of bounds.
func fileRange(data []byte, off, n uint64) ([]byte, bool) {
	end := off + n
	if end < off || end > uint64(len(data)) {
		return nil, false
	}
	return data[off:end], true
}

// sysvHashCount returns the symbol count of a DT_HASH table: nchain.
func sysvHashCount(data []byte, off uint64, bo binary.ByteOrder) (uint64, error) {
	h, ok := fileRange(data, off, 8)
	if !ok {
		return 0, errors.New("DT_HASH out of bounds")
	}
	return uint64(bo.Uint32(h[4:])), nil
}

// gnuHashCount returns the symbol count of a DT_GNU_HASH table: one past
// the last symbol of the chain of the bucket holding the highest index, or
// symoffset when every bucket is empty.
func gnuHashCount(data []byte, off uint64, class elf.Class, bo binary.ByteOrder) (uint64, error) {
	h, ok := fileRange(data, off, 16)
	if !ok {
		return 0, errors.New("DT_GNU_HASH out of bounds")
	}
	nbuckets, symoffset, bloomSize := uint64(bo.Uint32(h)), uint64(bo.Uint32(h[4:])), uint64(bo.Uint32(h[8:]))
	if nbuckets > maxGNUBuckets || bloomSize > maxGNUBuckets {
		return 0, fmt.Errorf("DT_GNU_HASH with %d buckets, %d bloom words", nbuckets, bloomSize)
	}
	word := uint64(8)
	if class == elf.ELFCLASS32 {
		word = 4
	}
	bucketsOff := off + 16 + bloomSize*word
	buckets, ok := fileRange(data, bucketsOff, nbuckets*4)
	if !ok {
		return 0, errors.New("DT_GNU_HASH buckets out of bounds")
	}
	last := uint64(0)
	for i := uint64(0); i < nbuckets; i++ {
		last = max(last, uint64(bo.Uint32(buckets[i*4:])))
	}
	if last < symoffset {
		return symoffset, nil
	}
	chainOff := bucketsOff + nbuckets*4
	for i := last; ; i++ {
		c, ok := fileRange(data, chainOff+(i-symoffset)*4, 4)
		if !ok {
			return 0, errors.New("DT_GNU_HASH chain out of bounds")
		}
		if bo.Uint32(c)&1 != 0 {
			return i + 1, nil
		}
	}
}
