package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
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
}

// ELFFunctions is what FindFunctions reports about one ELF file.
type ELFFunctions struct {
	Symbols []FunctionSymbol // sorted by Offset, then Name
	// Go reports whether the file is a Go binary (.gopclntab section or
	// runtime.pclntab symbol).
	Go bool
}

// FindFunctions returns the defined function symbols of the ELF file read by
// r whose raw name satisfies match, from .symtab and .dynsym (each name once),
// with the file offset of each. Aliases (several names at one address, e.g.
// C++ C1/C2 constructors) are all reported. Malformed input gives an error,
// never a panic.
func FindFunctions(r io.ReaderAt, match func(name string) bool) (res ELFFunctions, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = ELFFunctions{}, fmt.Errorf("malformed ELF: %v", p)
		}
	}()
	f, err := elf.NewFile(r)
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
	syms, symErr := f.Symbols()
	dyn, dynErr := f.DynamicSymbols()
	if len(syms) == 0 && len(dyn) == 0 && symErr != nil && !errors.Is(symErr, elf.ErrNoSymbols) {
		return ELFFunctions{}, symErr
	}
	if len(syms) == 0 && len(dyn) == 0 && dynErr != nil && !errors.Is(dynErr, elf.ErrNoSymbols) {
		return ELFFunctions{}, dynErr
	}
	res.Go = f.Section(".gopclntab") != nil || hasSymbol(syms, "runtime.pclntab")
	seen := make(map[string]bool)
	for _, s := range append(syms, dyn...) {
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Value == 0 || s.Section == elf.SHN_UNDEF || s.Name == "" || seen[s.Name] || !match(s.Name) {
			continue
		}
		seen[s.Name] = true
		off, ok := fileOffset(loads, s.Value)
		if !ok {
			continue
		}
		res.Symbols = append(res.Symbols, FunctionSymbol{Name: s.Name, Value: s.Value, Size: s.Size, Offset: off})
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
