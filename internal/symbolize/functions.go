package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sort"
)

// FunctionSymbol is a defined function symbol of an ELF file.
type FunctionSymbol struct {
	Name  string // raw (mangled) name
	Value uint64 // ELF virtual address
	Size  uint64
	// Offset is the file offset of the first instruction: Value - PT_LOAD
	// vaddr + PT_LOAD offset of the segment holding it. Uprobes are placed at
	// file offsets.
	Offset uint64
	// Go reports a Go function (one of the file's .gopclntab), not C code
	// linked into a Go binary with cgo.
	Go bool
	// Code is a copy of a Go function's machine code (Size bytes), for
	// finding its return instructions; nil for other functions and for one
	// larger than MaxGoCode.
	Code []byte
}

// MaxGoCode bounds the machine code FindFunctions copies of one Go
// function.
const MaxGoCode = 1 << 20

// ELFFunctions is what FindFunctions reports about one ELF file.
type ELFFunctions struct {
	Symbols []FunctionSymbol // sorted by Offset, then Name
	// Go reports whether the file is a Go binary (.gopclntab section or
	// runtime.pclntab symbol).
	Go      bool
	Machine elf.Machine
}

// FindFunctions returns the defined function symbols of the open ELF file f
// (of a process: open it with procfs.OpenMappedFile) whose raw name
// satisfies match, from .symtab and .dynsym (each name
// once), with the file offset of each. Aliases (several names at one
// address, e.g. C++ C1/C2 constructors) are all reported. The symbol tables
// are read in place in the mapped file, as the symbolizer reads them.
// Malformed input gives an error, never a panic.
func FindFunctions(f *os.File, match func(name string) bool) (ELFFunctions, error) {
	path := f.Name()
	mf, err := mapOpenFile(f)
	if err != nil {
		return ELFFunctions{}, fmt.Errorf("%s: %w", path, err)
	}
	defer mf.close()
	var res ELFFunctions
	if ferr := withFaultPanic(func() { res, err = findFunctions(mf.data, match) }); ferr != nil {
		return ELFFunctions{}, fmt.Errorf("malformed ELF %s: %w", path, ferr)
	}
	if err != nil {
		return ELFFunctions{}, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

func findFunctions(data []byte, match func(name string) bool) (ELFFunctions, error) {
	f, noSections, err := newELF(data)
	if err != nil {
		return ELFFunctions{}, err
	}
	var loads []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	if len(loads) == 0 {
		return ELFFunctions{}, errors.New("no PT_LOAD segment")
	}
	res := ELFFunctions{Machine: f.Machine}
	res.Go = f.Section(".gopclntab") != nil
	seen := make(map[string]bool)
	srcs, errs := symbolSources(f, data, noSections)
	if len(srcs) == 0 && len(errs) > 0 && !res.Go {
		return ELFFunctions{}, errors.Join(errs...)
	}
	var symtab *rawSymbols
	for _, raw := range srcs {
		if raw.typ == elf.SHT_SYMTAB {
			symtab = &raw
			if !res.Go {
				_, res.Go = raw.find("runtime.pclntab")
			}
		}
		for i := range raw.len() {
			s := raw.sym(i)
			typ := elf.ST_TYPE(s.info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
				continue
			}
			if s.value == 0 || s.shndx == uint16(elf.SHN_UNDEF) || s.name == 0 {
				continue
			}
			name := cstring(raw.strtab, uint64(s.name))
			if name == "" || seen[name] || !match(name) {
				continue
			}
			seen[name] = true
			off, ok := fileOffset(loads, s.value)
			if !ok {
				continue
			}
			res.Symbols = append(res.Symbols, FunctionSymbol{Name: name, Value: s.value, Size: s.size, Offset: off})
		}
	}
	if res.Go {
		// The symbol table gives runtime.text: with cgo, C code comes first.
		// Without the table Go functions could not be told from C code (a
		// uretprobe on a Go function breaks its goroutine): an error.
		t, err := newGoTable(f, data, symtab)
		if err != nil {
			return ELFFunctions{}, fmt.Errorf("a Go binary whose .gopclntab does not read: %w", err)
		}
		if symtab == nil { // stripped (-ldflags=-s): the functions of its pclntab
			res.Symbols = append(res.Symbols, goFunctions(t, loads, match, seen)...)
		}
		for i, s := range res.Symbols {
			if res.Symbols[i].Go = t.isEntry(s.Value); res.Symbols[i].Go && s.Size <= MaxGoCode {
				res.Symbols[i].Code = vaddrBytesOf(loads, data, s.Value, s.Size)
			}
		}
	}
	sort.Slice(res.Symbols, func(i, j int) bool {
		a, b := res.Symbols[i], res.Symbols[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Name < b.Name
	})
	return res, nil
}

// fileOffset translates an ELF virtual address into a file offset through
// the PT_LOAD segment holding it.
func fileOffset(loads []elf.ProgHeader, vaddr uint64) (uint64, bool) {
	for _, p := range loads {
		if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// goFunctions returns the functions of a Go binary's pclntab t whose name
// satisfies match and is not in seen.
func goFunctions(t *goTable, loads []elf.ProgHeader, match func(string) bool, seen map[string]bool) []FunctionSymbol {
	var out []FunctionSymbol
	t.functions(func(name string, entry, end uint64) {
		if seen[name] || !match(name) {
			return
		}
		seen[name] = true
		if off, ok := fileOffset(loads, entry); ok {
			out = append(out, FunctionSymbol{Name: name, Value: entry, Size: end - entry, Offset: off})
		}
	})
	return out
}

// vaddrBytesOf returns a copy of the size bytes of the file at virtual
// address addr, or nil when a PT_LOAD segment's file bytes do not hold
// them.
func vaddrBytesOf(loads []elf.ProgHeader, data []byte, addr, size uint64) []byte {
	for _, p := range loads {
		if addr < p.Vaddr || size > p.Filesz || addr-p.Vaddr > p.Filesz-size {
			continue
		}
		off := p.Off + addr - p.Vaddr
		if off < p.Off || off+size < off || off+size > uint64(len(data)) {
			return nil
		}
		return append([]byte(nil), data[off:off+size]...)
	}
	return nil
}
