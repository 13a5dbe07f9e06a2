package elfsym

import (
	"debug/elf"
	"errors"
	"fmt"
	"slices"
)

// ErrNoHashTable says a file's dynamic symbol table has no hash table
// (.gnu.hash or .hash) to look names up in.
var ErrNoHashTable = errors.New("no hash table of the dynamic symbols")

// maxChain bounds the entries Defines visits in one hash chain: a linker's
// chains hold a few; a longer one is a malformed (or hostile) file.
const maxChain = 1 << 12

// Defines reports whether f's dynamic symbol table defines one of names
// (a symbol of that name not undefined), looked up in its hash table, GNU
// (.gnu.hash, what GNU linkers write) or System V (.hash, what Go's linker
// writes): a few reads per name, whatever the table's size. Without a
// dynamic symbol table it returns elf.ErrNoSymbols; without a hash table
// ErrNoHashTable (Lookup then reads the table whole).
func Defines(f *elf.File, names ...string) (bool, error) {
	d, err := openDynamic(f)
	if err != nil {
		return false, err
	}
	var lookup func(string, []byte) (bool, error)
	switch {
	case d.gnu != nil:
		h := &gnuHash{dynamic: d, wordSize: 8}
		if f.Class == elf.ELFCLASS32 {
			h.wordSize = 4
		}
		if err := h.readHeader(); err != nil {
			return false, err
		}
		lookup = h.defines
	default:
		h := &sysvHash{dynamic: d}
		if err := h.readHeader(); err != nil {
			return false, err
		}
		lookup = h.defines
	}
	var nameBuf [maxName + 1]byte
	for _, name := range names {
		if len(name) > maxName {
			return false, fmt.Errorf("a name of %d bytes, at most %d are looked up", len(name), maxName)
		}
		if ok, err := lookup(name, nameBuf[:]); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// dynamic is a dynamic symbol table, its strings and its hash tables.
type dynamic struct {
	f              *elf.File
	symtab, strtab *elf.Section
	gnu, sysv      *elf.Section
	entSize        uint64 // of a symbol table entry
}

func openDynamic(f *elf.File) (*dynamic, error) {
	i := slices.IndexFunc(f.Sections, func(s *elf.Section) bool { return s.Type == elf.SHT_DYNSYM })
	if i < 0 || f.Sections[i].Type == elf.SHT_NOBITS {
		return nil, elf.ErrNoSymbols
	}
	d := &dynamic{f: f, symtab: f.Sections[i], entSize: elf.Sym64Size}
	if f.Class == elf.ELFCLASS32 {
		d.entSize = elf.Sym32Size
	}
	for _, s := range f.Sections {
		switch {
		case int(s.Link) != i:
		case s.Type == elf.SHT_GNU_HASH:
			d.gnu = s
		case s.Type == elf.SHT_HASH:
			d.sysv = s
		}
	}
	if d.gnu == nil && d.sysv == nil {
		return nil, ErrNoHashTable
	}
	if link := int(d.symtab.Link); link <= 0 || link >= len(f.Sections) {
		return nil, fmt.Errorf("%s: string table section %d out of range", d.symtab.Name, link)
	}
	d.strtab = f.Sections[d.symtab.Link]
	for _, s := range []*elf.Section{d.gnu, d.sysv, d.symtab, d.strtab} {
		if s != nil && (s.Flags&elf.SHF_COMPRESSED != 0 || s.Type == elf.SHT_NOBITS) {
			return nil, fmt.Errorf("%s: compressed or without data", s.Name)
		}
	}
	return d, nil
}

func (d *dynamic) u32(s *elf.Section, off uint64) (uint32, error) {
	var b [4]byte
	if _, err := s.ReadAt(b[:], int64(off)); err != nil {
		return 0, fmt.Errorf("%s at %#x: %w", s.Name, off, err)
	}
	return d.f.ByteOrder.Uint32(b[:]), nil
}

// entryDefines reports whether symbol index is name, defined.
func (d *dynamic) entryDefines(index uint64, name string, nameBuf []byte) (bool, error) {
	var e [elf.Sym64Size]byte
	entry := e[:d.entSize]
	if _, err := d.symtab.ReadAt(entry, int64(index*d.entSize)); err != nil {
		return false, fmt.Errorf("%s entry %d: %w", d.symtab.Name, index, err)
	}
	s := decode(d.f.Class, d.f.ByteOrder, entry)
	got, ok := readName(d.strtab, uint64(d.f.ByteOrder.Uint32(entry)), nameBuf)
	return ok && got == name && s.Section != elf.SHN_UNDEF, nil
}

// gnuHash is a .gnu.hash section: a bloom filter, buckets of the first
// symbol of each hash chain, and per symbol (from symoffset) its hash with
// the lowest bit set on a chain's last.
type gnuHash struct {
	*dynamic
	nbuckets, symoffset    uint32
	bloomWords, bloomShift uint32
	wordSize               uint64 // of a bloom filter word: 8 (ELF64) or 4
}

func (h *gnuHash) readHeader() error {
	var hdr [16]byte
	if _, err := h.gnu.ReadAt(hdr[:], 0); err != nil {
		return fmt.Errorf("%s header: %w", h.gnu.Name, err)
	}
	bo := h.f.ByteOrder
	h.nbuckets, h.symoffset = bo.Uint32(hdr[0:]), bo.Uint32(hdr[4:])
	h.bloomWords, h.bloomShift = bo.Uint32(hdr[8:]), bo.Uint32(hdr[12:])
	if h.nbuckets == 0 || h.bloomWords == 0 {
		return fmt.Errorf("%s: %d buckets, %d bloom words", h.gnu.Name, h.nbuckets, h.bloomWords)
	}
	return nil
}

// gnuHashOf is the GNU hash function of a symbol name.
func gnuHashOf(name string) uint32 {
	h := uint32(5381)
	for i := 0; i < len(name); i++ {
		h = h*33 + uint32(name[i])
	}
	return h
}

// defines looks name up: the bloom filter, its bucket, then its chain,
// comparing the names of the entries whose hash matches.
func (h *gnuHash) defines(name string, nameBuf []byte) (bool, error) {
	hv := gnuHashOf(name)
	bits := uint32(h.wordSize * 8)
	var wb [8]byte
	wordOff := 16 + uint64((hv/bits)%h.bloomWords)*h.wordSize
	if _, err := h.gnu.ReadAt(wb[:h.wordSize], int64(wordOff)); err != nil {
		return false, fmt.Errorf("%s bloom filter: %w", h.gnu.Name, err)
	}
	word := uint64(h.f.ByteOrder.Uint32(wb[:]))
	if h.wordSize == 8 {
		word = h.f.ByteOrder.Uint64(wb[:])
	}
	mask := uint64(1)<<(hv%bits) | uint64(1)<<((hv>>h.bloomShift)%bits)
	if word&mask != mask {
		return false, nil
	}
	buckets := 16 + uint64(h.bloomWords)*h.wordSize
	index, err := h.u32(h.gnu, buckets+uint64(hv%h.nbuckets)*4)
	if err != nil || index == 0 {
		return false, err
	}
	if index < h.symoffset {
		return false, fmt.Errorf("%s: bucket symbol %d before the hashed ones (%d)", h.gnu.Name, index, h.symoffset)
	}
	chains := buckets + uint64(h.nbuckets)*4
	for range maxChain {
		chained, err := h.u32(h.gnu, chains+uint64(index-h.symoffset)*4)
		if err != nil {
			return false, err
		}
		if chained|1 == hv|1 {
			if ok, err := h.entryDefines(uint64(index), name, nameBuf); ok || err != nil {
				return ok, err
			}
		}
		if chained&1 != 0 {
			return false, nil // the chain's last entry
		}
		index++
	}
	return false, fmt.Errorf("%s: a hash chain longer than %d entries", h.gnu.Name, maxChain)
}

// sysvHash is a System V .hash section: buckets of the first symbol of
// each chain, and per symbol the next in its chain (0 ends it).
type sysvHash struct {
	*dynamic
	nbucket, nchain uint32
}

func (h *sysvHash) readHeader() error {
	var err error
	if h.nbucket, err = h.u32(h.sysv, 0); err != nil {
		return err
	}
	if h.nchain, err = h.u32(h.sysv, 4); err != nil {
		return err
	}
	if h.nbucket == 0 {
		return fmt.Errorf("%s: no buckets", h.sysv.Name)
	}
	return nil
}

// sysvHashOf is the System V hash function of a symbol name.
func sysvHashOf(name string) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<4 + uint32(name[i])
		g := h & 0xf0000000
		h ^= g >> 24
		h &^= g
	}
	return h
}

// defines follows name's bucket's chain.
func (h *sysvHash) defines(name string, nameBuf []byte) (bool, error) {
	index, err := h.u32(h.sysv, 8+uint64(sysvHashOf(name)%h.nbucket)*4)
	if err != nil {
		return false, err
	}
	chains := 8 + uint64(h.nbucket)*4
	for range maxChain {
		if index == 0 {
			return false, nil
		}
		if index >= h.nchain {
			return false, fmt.Errorf("%s: symbol %d past the chains (%d)", h.sysv.Name, index, h.nchain)
		}
		if ok, err := h.entryDefines(uint64(index), name, nameBuf); ok || err != nil {
			return ok, err
		}
		if index, err = h.u32(h.sysv, chains+uint64(index)*4); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("%s: a hash chain longer than %d entries", h.sysv.Name, maxChain)
}
