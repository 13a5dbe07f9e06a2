package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// elfFile is what the symbolizer keeps of one ELF file: its loadable
// segments, build ids, the pclntab reader of Go binaries and the function
// symbols, the latter built on first use. Symbol names, the pclntab and the
// string tables stay in the file's mapping, outside the Go heap.
type elfFile struct {
	mapped     *mappedFile      // nil when parsed from a byte slice
	loads      []elf.ProgHeader // PT_LOAD headers
	buildIDGNU string
	buildIDGo  string
	gotab      *goTable // nil unless the file is a Go binary with a usable .gopclntab

	// interps are the runtimes' interpreters looked for in the file
	// (interpreter), by runtime.
	interps map[*runtimes.Runtime]fileInterpreter

	symSrc    []rawSymbols // the debug file's .symtab, then .symtab, then .dynsym
	syms      symbolTable
	symsBuilt bool
	// data is the file's bytes (its mapping), parts the pieces of the
	// runtimes' entry functions no symbol names, found with the table.
	data  []byte
	parts []splitPart

	// hasSymtab says the file's own .symtab names functions; without it
	// (and without a pclntab) the separate debug file is looked for.
	hasSymtab    bool
	debugLink    debugLink // .gnu_debuglink, when hasDebugLink
	hasDebugLink bool
	debug        *debugFile // the separate debug file in use, or nil

	// touched says lookups read its pages since they were last released.
	touched bool

	// resolved caches what lookups found, by address, so that processes
	// of one binary (a restarting tool, a fleet of workers) share its
	// frames without touching the file's pages again.
	resolved map[uint64]resolvedAddr
}

// resolvedAddr is what resolveFile found at one address.
type resolvedAddr struct {
	gfs  []goFrame
	name string
}

// maxResolvedPerFile bounds elfFile.resolved; a full cache starts over.
const maxResolvedPerFile = 4096

// maxNoteSize bounds the notes read for build ids.
const maxNoteSize = 1 << 16

// parseELF parses the ELF file data, in place. It never panics on
// malformed input (debug/elf may; the caller recovers, see openELF).
func parseELF(data []byte) (*elfFile, error) {
	f, noSections, err := newELF(data)
	if err != nil {
		return nil, err
	}
	ef := &elfFile{data: data}
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

	var symErrs []error
	ef.symSrc, symErrs = symbolSources(f, data, noSections)
	ef.hasSymtab = len(ef.symSrc) > 0 && ef.symSrc[0].typ == elf.SHT_SYMTAB && hasFunctionSymbols(ef.symSrc[0])
	if !noSections {
		ef.debugLink, ef.hasDebugLink = parseDebugLink(f, data)
	}
	hasPclntab := f.Section(".gopclntab") != nil
	if hasPclntab || ef.buildIDGo != "" {
		var symtab *rawSymbols
		if len(ef.symSrc) > 0 && ef.symSrc[0].typ == elf.SHT_SYMTAB {
			symtab = &ef.symSrc[0]
		}
		gt, err := newGoTable(f, data, symtab)
		switch {
		case errors.Is(err, errNoPclntab) && !hasPclntab:
			// A Go build id but no pclntab: symbols only.
		case err != nil:
			return nil, fmt.Errorf("go pclntab: %w", err)
		default:
			ef.gotab = gt
		}
	}
	if len(ef.symSrc) == 0 && ef.gotab == nil && len(symErrs) > 0 {
		return nil, errors.Join(symErrs...)
	}
	return ef, nil
}

// wantsDebugFile says whether a separate debug file would name more
// functions: the file has neither a Go pclntab nor function symbols in its
// own .symtab.
func (ef *elfFile) wantsDebugFile() bool { return ef.gotab == nil && !ef.hasSymtab }

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

// symbol returns the (raw) name of the function containing vaddr, or "".
// The first call sorts the function symbols of the first source that has
// any (the debug file's .symtab, the file's .symtab, .dynsym).
func (ef *elfFile) symbol(vaddr uint64) string {
	if !ef.symsBuilt {
		ef.symsBuilt = true
		for _, src := range ef.symSrc {
			if ef.syms = functionTable(src); len(ef.syms.entries) > 0 {
				// Parsed again only for the files that need it.
				if definesEntryFunction(src) || holdsUnnamedEntry(all.Runtimes, src) {
					if f, _, err := newELF(ef.data); err == nil {
						ef.parts = append(findSplitParts(f, &ef.syms, src), unnamedEntryParts(all.Runtimes, f, &ef.syms, src)...)
					}
				}
				break
			}
		}
		ef.symSrc = nil
	}
	if name := ef.syms.lookup(vaddr); name != "" || len(ef.parts) == 0 {
		return name
	}
	return partAt(ef.parts, vaddr)
}

// heapCost estimates the Go heap held by ef, for the cache budget.
func (ef *elfFile) heapCost() int64 {
	const base = 1 << 10
	cost := int64(base + len(ef.loads)*64 + len(ef.syms.entries)*16 + len(ef.resolved)*96)
	if ef.gotab != nil && ef.gotab.legacy != nil {
		cost += int64(len(ef.gotab.legacy.Funcs)) * 256
	}
	if ef.debug != nil {
		cost += base
	}
	return cost
}

// releasePages drops the resident pages of ef's mappings.
func (ef *elfFile) releasePages() {
	ef.touched = false
	ef.mapped.releasePages()
	if ef.debug != nil {
		ef.debug.mapped.releasePages()
	}
}

// close releases the mappings of ef.
func (ef *elfFile) close() error {
	err := ef.mapped.close()
	if ef.debug != nil {
		err = errors.Join(err, ef.debug.mapped.close())
	}
	return err
}

// demangleName returns the demangled C++ (or Rust) name, or name itself
// when it is not mangled or demangling fails.
func demangleName(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	return demangle.Filter(name, demangle.NoClones)
}

// symbolSources returns the symbol tables of f: .symtab, then .dynsym,
// found through the section headers; when neither is usable (no section
// headers, or corrupt ones), the dynamic symbols found through the program
// headers.
func symbolSources(f *elf.File, data []byte, noSections bool) ([]rawSymbols, []error) {
	var out []rawSymbols
	var errs []error
	if noSections {
		errs = append(errs, errors.New("section header table unusable"))
	} else {
		for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
			raw, ok, err := rawSymbolSection(f, data, typ)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", typ, err))
			}
			if ok {
				out = append(out, raw)
			}
		}
	}
	if len(out) == 0 {
		raw, ok, err := dynamicSymbols(f, data)
		if err != nil {
			errs = append(errs, fmt.Errorf("PT_DYNAMIC: %w", err))
		}
		if ok {
			out = append(out, raw)
		}
	}
	return out, errs
}

// gnuBuildID returns the hex GNU build id of f, or "", from its note
// sections or, without section headers, its PT_NOTE segments.
func gnuBuildID(f *elf.File) string {
	if len(f.Sections) == 0 {
		for _, p := range f.Progs {
			if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSize {
				continue
			}
			data := make([]byte, p.Filesz)
			if _, err := p.ReadAt(data, 0); err != nil {
				continue
			}
			if desc, ok := findNote(data, f.ByteOrder, "GNU", 3 /* NT_GNU_BUILD_ID */); ok {
				return hex.EncodeToString(desc)
			}
		}
		return ""
	}
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
