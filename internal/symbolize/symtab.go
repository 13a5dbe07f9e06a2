package symbolize

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
)

// symEntry is one function symbol, 16 bytes: its name is an offset into
// the string table, read (and copied) only when the symbol is hit.
type symEntry struct {
	addr uint64
	size uint32 // clamped to 4 GiB
	name uint32 // offset in symbolTable.strtab
}

// rawSymbols is an ELF symbol table section and its string table, in place
// in the file data.
type rawSymbols struct {
	data    []byte // the entries, without the leading null symbol
	strtab  []byte
	entSize int
	typ     elf.SectionType
	class   elf.Class
	bo      binary.ByteOrder
	le64    bool // 64-bit little-endian entries
}

// symbolTable is the sorted function symbols of a file, one per address.
type symbolTable struct {
	entries []symEntry
	strtab  []byte
}

// rawSymbolSection returns the symbol table section of type typ of f, in
// place in data, or ok false when there is none.
func rawSymbolSection(f *elf.File, data []byte, typ elf.SectionType) (rawSymbols, bool, error) {
	var sec *elf.Section
	for _, s := range f.Sections {
		if s.Type == typ {
			sec = s
			break
		}
	}
	if sec == nil {
		return rawSymbols{}, false, nil
	}
	entSize := elf.Sym64Size
	if f.Class == elf.ELFCLASS32 {
		entSize = elf.Sym32Size
	}
	if sec.Link >= uint32(len(f.Sections)) {
		return rawSymbols{}, false, errors.New("symbol table: bad string table link")
	}
	syms, ok1 := sectionBytes(data, sec)
	strs, ok2 := sectionBytes(data, f.Sections[sec.Link])
	if !ok1 || !ok2 {
		return rawSymbols{}, false, errors.New("symbol table out of bounds")
	}
	if len(syms) < entSize {
		return rawSymbols{}, false, nil
	}
	syms = syms[entSize : len(syms)-len(syms)%entSize]
	le64 := f.Class == elf.ELFCLASS64 && f.ByteOrder == binary.LittleEndian
	return rawSymbols{data: syms, strtab: strs, entSize: entSize, typ: typ, class: f.Class, bo: f.ByteOrder, le64: le64}, true, nil
}

// sectionBytes returns the content of s in place in data.
func sectionBytes(data []byte, s *elf.Section) ([]byte, bool) {
	if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 {
		return nil, false
	}
	end := s.Offset + s.Size
	if end < s.Offset || end > uint64(len(data)) {
		return nil, false
	}
	return data[s.Offset:end], true
}

// rawSym is the part of an ELF symbol the symbolizer uses.
type rawSym struct {
	name        uint32
	info        uint8
	shndx       uint16
	value, size uint64
}

func (r rawSymbols) len() int { return len(r.data) / r.entSize }

func (r rawSymbols) sym(i int) rawSym {
	if r.le64 { // x86-64 and arm64: no calls through the byte order
		b := r.data[i*elf.Sym64Size : (i+1)*elf.Sym64Size]
		return rawSym{name: binary.LittleEndian.Uint32(b), info: b[4], shndx: binary.LittleEndian.Uint16(b[6:]),
			value: binary.LittleEndian.Uint64(b[8:]), size: binary.LittleEndian.Uint64(b[16:])}
	}
	b := r.data[i*r.entSize:]
	if r.class == elf.ELFCLASS32 {
		return rawSym{name: r.bo.Uint32(b), value: uint64(r.bo.Uint32(b[4:])), size: uint64(r.bo.Uint32(b[8:])),
			info: b[12], shndx: r.bo.Uint16(b[14:])}
	}
	return rawSym{name: r.bo.Uint32(b), info: b[4], shndx: r.bo.Uint16(b[6:]),
		value: r.bo.Uint64(b[8:]), size: r.bo.Uint64(b[16:])}
}

// find returns the value of the symbol called name.
func (r rawSymbols) find(name string) (uint64, bool) {
	s, ok := r.findSym(name)
	return s.value, ok
}

// findSym returns the first symbol called name.
func (r rawSymbols) findSym(name string) (rawSym, bool) {
	for i := range r.len() {
		s := r.sym(i)
		if int(s.name)+len(name) < len(r.strtab) && r.strtab[s.name] == name[0] &&
			string(r.strtab[s.name:int(s.name)+len(name)]) == name && r.strtab[int(s.name)+len(name)] == 0 {
			return s, true
		}
	}
	return rawSym{}, false
}

// isFunction says whether s is a defined, named function symbol of r.
func (r rawSymbols) isFunction(s rawSym) bool {
	typ := elf.ST_TYPE(s.info)
	if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
		return false
	}
	// A zero name offset is the empty name.
	return s.value != 0 && s.shndx != uint16(elf.SHN_UNDEF) && s.name != 0 && int(s.name) < len(r.strtab)
}

// hasFunctionSymbols says whether r has a function symbol.
func hasFunctionSymbols(r rawSymbols) bool {
	for i := range r.len() {
		if r.isFunction(r.sym(i)) {
			return true
		}
	}
	return false
}

// functionTable keeps the defined, named function symbols of r, sorted by
// address, one per address (the first with the largest size wins).
func functionTable(r rawSymbols) symbolTable {
	// Counted first: appending to a growing slice would allocate twice the
	// table (node's and libjvm's are megabytes) in garbage at first report.
	n := 0
	for i := range r.len() {
		if r.isFunction(r.sym(i)) {
			n++
		}
	}
	// Sorted with the symbol's index in place of its name, so that an
	// unstable sort keeps the first of the symbols with one address and
	// size, as a stable one would, at a fraction of its cost.
	out := make([]symEntry, 0, n)
	for i := range r.len() {
		s := r.sym(i)
		if !r.isFunction(s) {
			continue
		}
		out = append(out, symEntry{addr: s.value, size: uint32(min(s.size, math.MaxUint32)), name: uint32(i)})
	}
	slices.SortFunc(out, func(a, b symEntry) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	out = slices.CompactFunc(out, func(a, b symEntry) bool { return a.addr == b.addr })
	for i := range out {
		out[i].name = r.sym(int(out[i].name)).name
	}
	return symbolTable{entries: slices.Clip(out), strtab: r.strtab}
}

// How many preceding symbols to look at when the nearest one is too small
// to contain the address (symbols nested in bigger functions).
const maxSymbolBacktrack = 4

// lookup returns the (raw) name of the function containing vaddr, or "".
// A symbol with a size must contain the address; a symbol without a size
// covers up to the next symbol.
func (t *symbolTable) lookup(vaddr uint64) string {
	e := t.entries
	i := sort.Search(len(e), func(i int) bool { return e[i].addr > vaddr }) - 1
	for j := i; j >= 0 && j > i-maxSymbolBacktrack; j-- {
		s := e[j]
		if s.size == 0 {
			if j == i {
				return cstring(t.strtab, uint64(s.name))
			}
			continue
		}
		if vaddr < s.addr+uint64(s.size) {
			return cstring(t.strtab, uint64(s.name))
		}
	}
	return ""
}
