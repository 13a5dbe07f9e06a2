// Package elfsym finds a few symbols of an ELF file by name without
// decoding its whole symbol table. debug/elf's Symbols and DynamicSymbols
// read the table and its string table whole and make a Symbol and a string
// for every entry: 19 MB for node's .dynsym alone. The runtimes' detectors
// need a handful of names, so Lookup reads both tables in fixed-size chunks
// and decodes only the entries whose names match.
package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Match says which names Lookup returns: those equal to one of Names or
// starting with one of Prefixes (an empty prefix: every name).
type Match struct {
	Names    []string
	Prefixes []string
}

// Symbol is a symbol Lookup found; Index is its index in its table (the
// null symbol 0 included, as relocations count).
type Symbol struct {
	elf.Symbol
	Index int
}

// Bounds on what a file may make Lookup hold: the candidate name offsets
// (strings in the string table matching a pattern), the symbols returned
// and a name's length.
const (
	MaxCandidates = 1 << 16
	MaxSymbols    = 1 << 12
	maxName       = 1 << 10
	chunk         = 1 << 16
)

// buffers holds the chunks Lookup reads through, chunk+maxName+1 bytes: a
// loader detecting runtimes in every file of a node calls it for each.
var buffers = sync.Pool{New: func() any { b := make([]byte, chunk+maxName+1); return &b }}

// ErrTooMany says a table has more names matching than Lookup holds.
var ErrTooMany = errors.New("more matching symbols than the bound")

// Lookup returns the symbols of f's table of type typ (elf.SHT_SYMTAB or
// elf.SHT_DYNSYM) that m matches, in table order. Without that table it
// returns elf.ErrNoSymbols, as debug/elf does.
func Lookup(f *elf.File, typ elf.SectionType, m Match) ([]Symbol, error) {
	var symtab *elf.Section
	for _, s := range f.Sections {
		if s.Type == typ {
			symtab = s
			break
		}
	}
	if symtab == nil {
		return nil, elf.ErrNoSymbols
	}
	if symtab.Link == 0 || int(symtab.Link) >= len(f.Sections) {
		return nil, fmt.Errorf("%s: string table section %d out of range", symtab.Name, symtab.Link)
	}
	strtab := f.Sections[symtab.Link]
	if symtab.Flags&elf.SHF_COMPRESSED != 0 || strtab.Flags&elf.SHF_COMPRESSED != 0 {
		return nil, fmt.Errorf("%s: compressed symbol tables are not read", symtab.Name)
	}
	if strtab.Type == elf.SHT_NOBITS || symtab.Type == elf.SHT_NOBITS {
		return nil, elf.ErrNoSymbols
	}
	if slices.Contains(m.Prefixes, "") {
		return entries(f, symtab, strtab, nil) // every name
	}
	candidates, err := nameOffsets(strtab, m)
	if err != nil || len(candidates) == 0 {
		return nil, err
	}
	return entries(f, symtab, strtab, candidates)
}

// nameOffsets returns the offsets in strtab where a name m matches may
// start: every occurrence of a prefix, or of a name and its NUL. A name
// may start inside another string (linkers merge a string with the tail of
// a longer one), so every occurrence counts, not only string starts.
func nameOffsets(strtab *elf.Section, m Match) (map[uint32]bool, error) {
	// A name holds no NUL: a pattern with one matches nothing.
	var patterns [][]byte
	longest := 0
	for _, n := range m.Names {
		if !strings.Contains(n, "\x00") {
			patterns = append(patterns, append([]byte(n), 0))
		}
	}
	for _, p := range m.Prefixes {
		if !strings.Contains(p, "\x00") {
			patterns = append(patterns, []byte(p))
		}
	}
	for _, p := range patterns {
		longest = max(longest, len(p))
	}
	if longest == 0 {
		return nil, nil
	}
	if longest > maxName+1 {
		return nil, fmt.Errorf("a name of %d bytes, at most %d are looked up", longest, maxName)
	}
	found := map[uint32]bool{}
	pooled := buffers.Get().(*[]byte)
	defer buffers.Put(pooled)
	buf := (*pooled)[:chunk+longest-1]
	size := strtab.Size
	// Each read overlaps the last by longest-1 bytes, so a pattern across
	// two chunks is seen whole once; an occurrence in the overlap is seen
	// twice and counted once.
	for start := uint64(0); start < size; start += chunk {
		n := min(uint64(len(buf)), size-start)
		b := buf[:n]
		if _, err := strtab.ReadAt(b, int64(start)); err != nil {
			return nil, fmt.Errorf("%s: %w", strtab.Name, err)
		}
		for _, p := range patterns {
			for off := 0; ; {
				i := bytes.Index(b[off:], p)
				if i < 0 {
					break
				}
				at := start + uint64(off+i)
				if at > 0xffffffff {
					break
				}
				found[uint32(at)] = true
				if len(found) > MaxCandidates {
					return nil, fmt.Errorf("%s: %w (%d candidate names)", strtab.Name, ErrTooMany, MaxCandidates)
				}
				off += i + 1
			}
		}
	}
	return found, nil
}

// entries returns the symbols of symtab whose name offsets are candidates
// (nil: every symbol with a name).
func entries(f *elf.File, symtab, strtab *elf.Section, candidates map[uint32]bool) ([]Symbol, error) {
	entSize := uint64(elf.Sym64Size)
	if f.Class == elf.ELFCLASS32 {
		entSize = elf.Sym32Size
	}
	count := symtab.Size / entSize
	per := uint64(chunk) / entSize
	pooled := buffers.Get().(*[]byte)
	defer buffers.Put(pooled)
	buf, nameBuf := (*pooled)[:per*entSize], (*pooled)[chunk:]
	bo := f.ByteOrder
	var out []Symbol
	for first := uint64(0); first < count; first += per {
		n := min(per, count-first)
		b := buf[:n*entSize]
		if _, err := symtab.ReadAt(b, int64(first*entSize)); err != nil {
			return nil, fmt.Errorf("%s: %w", symtab.Name, err)
		}
		for i := range n {
			index := first + i
			if index == 0 {
				continue // the null symbol
			}
			e := b[i*entSize : (i+1)*entSize]
			nameOff := bo.Uint32(e[:4])
			if candidates != nil && !candidates[nameOff] {
				continue
			}
			name, ok := readName(strtab, uint64(nameOff), nameBuf)
			if !ok {
				continue
			}
			s := decode(f.Class, bo, e)
			s.Name = name
			if len(out) == MaxSymbols {
				return nil, fmt.Errorf("%s: %w (%d symbols)", symtab.Name, ErrTooMany, MaxSymbols)
			}
			out = append(out, Symbol{Symbol: s, Index: int(index)})
		}
	}
	return out, nil
}

// decode decodes a symbol table entry but its name.
func decode(class elf.Class, bo binary.ByteOrder, e []byte) elf.Symbol {
	if class == elf.ELFCLASS32 {
		return elf.Symbol{
			Value:   uint64(bo.Uint32(e[4:])),
			Size:    uint64(bo.Uint32(e[8:])),
			Info:    e[12],
			Other:   e[13],
			Section: elf.SectionIndex(bo.Uint16(e[14:])),
		}
	}
	return elf.Symbol{
		Info:    e[4],
		Other:   e[5],
		Section: elf.SectionIndex(bo.Uint16(e[6:])),
		Value:   bo.Uint64(e[8:]),
		Size:    bo.Uint64(e[16:]),
	}
}

// readName reads the NUL-terminated name at off of strtab, of at most
// maxName bytes, through buf (maxName+1 bytes).
func readName(strtab *elf.Section, off uint64, buf []byte) (string, bool) {
	if off >= strtab.Size {
		return "", false
	}
	b := buf[:min(uint64(len(buf)), strtab.Size-off)]
	if _, err := strtab.ReadAt(b, int64(off)); err != nil {
		return "", false
	}
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return "", false
	}
	return string(b[:end]), true
}
