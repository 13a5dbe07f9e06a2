package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// elfSym is one function symbol of an ELF file.
type elfSym struct {
	addr, size uint64
	name       string
}

// elfFile is what the symbolizer keeps of one parsed ELF file: its loadable
// segments, sorted function symbols, build ids and, for Go binaries, the
// pclntab reader.
type elfFile struct {
	loads      []elf.ProgHeader // PT_LOAD headers
	syms       []elfSym         // sorted by addr
	buildIDGNU string
	buildIDGo  string
	gotab      *goTable // nil unless the file is a Go binary with a usable .gopclntab
}

// maxNoteSize bounds the notes read for build ids.
const maxNoteSize = 1 << 16

// parseELF parses the ELF file read by r. It never panics on malformed input
// (debug/elf may; the caller recovers, see openELF).
func parseELF(r io.ReaderAt) (*elfFile, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	ef := &elfFile{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			ef.loads = append(ef.loads, p.ProgHeader)
		}
	}
	if len(ef.loads) == 0 {
		return nil, errors.New("no PT_LOAD segment")
	}
	ef.buildIDGNU = gnuBuildID(f)
	ef.buildIDGo = goBuildID(f)

	// .symtab first; fall back to .dynsym when there is no usable .symtab.
	syms, symErr := f.Symbols()
	ef.syms = functionSymbols(syms)
	if len(ef.syms) == 0 {
		dyn, _ := f.DynamicSymbols()
		ef.syms = functionSymbols(dyn)
	}
	if f.Section(".gopclntab") != nil || hasSymbol(syms, "runtime.pclntab") {
		gt, err := newGoTable(f, syms)
		if err != nil {
			return nil, fmt.Errorf("go pclntab: %w", err)
		}
		ef.gotab = gt
	}
	if len(ef.syms) == 0 && ef.gotab == nil && symErr != nil && !errors.Is(symErr, elf.ErrNoSymbols) {
		return nil, symErr
	}
	return ef, nil
}

func hasSymbol(syms []elf.Symbol, name string) bool {
	for _, s := range syms {
		if s.Name == name {
			return true
		}
	}
	return false
}

// functionSymbols keeps defined function symbols, sorted by address, one per
// address (the first with a size wins).
func functionSymbols(in []elf.Symbol) []elfSym {
	out := make([]elfSym, 0, len(in))
	for _, s := range in {
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Value == 0 || s.Section == elf.SHN_UNDEF || s.Name == "" {
			continue
		}
		out = append(out, elfSym{addr: s.Value, size: s.Size, name: s.Name})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].addr != out[j].addr {
			return out[i].addr < out[j].addr
		}
		return out[i].size > out[j].size
	})
	dedup := out[:0]
	for i, s := range out {
		if i > 0 && s.addr == out[i-1].addr {
			continue
		}
		dedup = append(dedup, s)
	}
	return dedup
}

// vaddr translates a file offset into the ELF virtual address through the
// PT_LOAD segment containing it.
func (ef *elfFile) vaddr(off uint64) (uint64, bool) {
	for _, p := range ef.loads {
		if off >= p.Off && off < p.Off+max(p.Filesz, 1) {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// How many preceding symbols to look at when the nearest one is too small
// to contain the address (symbols nested in bigger functions).
const maxSymbolBacktrack = 4

// symbol returns the (raw) name of the function containing vaddr, or "".
// A symbol with a size must contain the address; a symbol without a size
// covers up to the next symbol.
func (ef *elfFile) symbol(vaddr uint64) string {
	i := sort.Search(len(ef.syms), func(i int) bool { return ef.syms[i].addr > vaddr }) - 1
	for j := i; j >= 0 && j > i-maxSymbolBacktrack; j-- {
		s := ef.syms[j]
		if s.size == 0 {
			if j == i {
				return s.name
			}
			continue
		}
		if vaddr < s.addr+s.size {
			return s.name
		}
	}
	return ""
}

// demangleName returns the demangled C++ (or Rust) name, or name itself
// when it is not mangled or demangling fails.
func demangleName(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	return demangle.Filter(name, demangle.NoClones)
}

// gnuBuildID returns the hex GNU build id of f, or "".
func gnuBuildID(f *elf.File) string {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNoteSize {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		if desc, ok := findNote(data, f.ByteOrder, "GNU", 3 /* NT_GNU_BUILD_ID */); ok {
			return hex.EncodeToString(desc)
		}
	}
	return ""
}

// goBuildID returns the Go build id of f from its .note.go.buildid note,
// or "".
func goBuildID(f *elf.File) string {
	if s := f.Section(".note.go.buildid"); s != nil && s.Size <= maxNoteSize {
		if data, err := s.Data(); err == nil {
			if desc, ok := findNote(data, f.ByteOrder, "Go", 4 /* ELF_NOTE_GOBUILDID_TAG */); ok {
				return string(desc)
			}
		}
	}
	// Without the note the linker still leaves the id at the start of .text.
	s := f.Section(".text")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return ""
	}
	buf := make([]byte, min(s.Size, 4096))
	if n, _ := s.ReadAt(buf, 0); n > 0 {
		return goBuildIDString(buf[:n])
	}
	return ""
}

// goBuildIDString extracts the id from "\xff Go build ID: \"...\"\n \xff" in b.
func goBuildIDString(b []byte) string {
	const prefix = "\xff Go build ID: \""
	i := bytes.Index(b, []byte(prefix))
	if i < 0 {
		return ""
	}
	b = b[i+len(prefix):]
	j := bytes.IndexByte(b, '"')
	if j < 0 {
		return ""
	}
	return string(b[:j])
}

// findNote walks the notes in data and returns the descriptor of the first
// one with the given name and type.
func findNote(data []byte, bo binary.ByteOrder, name string, typ uint32) ([]byte, bool) {
	align4 := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		ntype := bo.Uint32(data[8:])
		data = data[12:]
		if namesz > uint64(len(data)) || align4(namesz) > uint64(len(data)) {
			return nil, false
		}
		n := bytes.TrimRight(data[:namesz], "\x00")
		data = data[align4(namesz):]
		if descsz > uint64(len(data)) {
			return nil, false
		}
		desc := data[:descsz]
		if string(n) == name && ntype == typ {
			return desc, true
		}
		if align4(descsz) > uint64(len(data)) {
			return nil, false
		}
		data = data[align4(descsz):]
	}
	return nil, false
}
