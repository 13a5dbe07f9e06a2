package ruby

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Relocation types that store load bias + addend at an address.
const (
	rX8664Relative   = 8    // R_X86_64_RELATIVE
	rAArch64Relative = 1027 // R_AARCH64_RELATIVE
)

// ErrNoEntry means the file's vm_exec_core was not found.
var ErrNoEntry = errors.New("ruby: vm_exec_core not found")

// EntryRange returns the link-time code range [start, end) of f's
// vm_exec_core, the function that runs the Ruby frames of one vm_exec
// call: the native frames a run of Ruby frames replaces. It is static and
// Debian's libruby is stripped, so it is found by its instruction table:
// built with direct threading (OPT_DIRECT_THREADED_CODE, Debian's 3.1 and
// 3.3 on amd64 and arm64), vm_exec_core holds insns_address_table, a
// static array of the addresses of its VM_INSTRUCTION_SIZE instruction
// handlers (labels inside it; an iseq's iseq_encoded words are those
// addresses). In a shared library each entry is a relative relocation, so
// the table is a run of Layout.Instructions consecutive relative
// relocations (8 bytes apart) whose addends lie in the code range of one
// .eh_frame FDE: that FDE is vm_exec_core's. Code the compiler moved out
// of the function (a ".cold" part, an FDE of its own) is not in the
// range.
func EntryRange(f *elf.File) (start, end uint64, err error) {
	in, err := Detect(f)
	if err != nil {
		return 0, 0, err
	}
	relocs, err := relativeRelocations(f)
	if err != nil {
		return 0, 0, err
	}
	fdes, err := cfi.FunctionRanges(f)
	if err != nil {
		return 0, 0, fmt.Errorf("ruby: the FDEs of .eh_frame: %w", err)
	}
	r, ok := handlerTable(relocs, fdes, int(in.Layout.Instructions))
	if !ok {
		return 0, 0, fmt.Errorf("%w: no run of %d relative relocations into one function (Ruby %s)", ErrNoEntry, in.Layout.Instructions, in.Version)
	}
	return r.Start, r.End, nil
}

// yjitCode says whether the executable mapping m of a Ruby process holds
// YJIT's code: private anonymous memory (YJIT maps its code block so; the
// Ruby of the process is the only JIT there, though a C extension's FFI
// closures look the same). vm_exec calls it where it would call
// vm_exec_core: its frame is a run's entry frame (Runtime.EntryCode).
func yjitCode(m procfs.Map) bool {
	return m.Executable() && m.Path == "" && m.Inode == 0 && len(m.Perms) == 4 && m.Perms[3] == 'p'
}

// reloc is a relative relocation: the word at Off is bias + Addend.
type reloc struct{ Off, Addend uint64 }

// handlerTable finds the function (an FDE's range) holding the addends of
// a run of exactly n relocations 8 bytes apart, all into that function; a
// second such run makes it ambiguous (false).
func handlerTable(relocs []reloc, fdes []cfi.Range, n int) (cfi.Range, bool) {
	fdeOf := func(addr uint64) int {
		i := sort.Search(len(fdes), func(i int) bool { return fdes[i].End > addr })
		if i < len(fdes) && fdes[i].Start <= addr {
			return i
		}
		return -1
	}
	found := -1
	for i := 0; i < len(relocs); {
		fde := fdeOf(relocs[i].Addend)
		j := i + 1
		for fde >= 0 && j < len(relocs) && relocs[j].Off == relocs[j-1].Off+8 && fdeOf(relocs[j].Addend) == fde {
			j++
		}
		if fde >= 0 && j-i == n {
			if found >= 0 {
				return cfi.Range{}, false
			}
			found = fde
		}
		i = j
	}
	if found < 0 {
		return cfi.Range{}, false
	}
	return fdes[found], true
}

// relativeRelocations returns f's relative relocations (of f's machine)
// from its relocation sections with addends, sorted by address.
func relativeRelocations(f *elf.File) ([]reloc, error) {
	typ := uint32(rX8664Relative)
	if f.Machine == elf.EM_AARCH64 {
		typ = rAArch64Relative
	}
	var out []reloc
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Size%24 != 0 || s.Size > 1<<28 { //nolint:misspell // ELF's name
			continue
		}
		b := make([]byte, s.Size)
		if _, err := io.ReadFull(s.Open(), b); err != nil {
			return nil, fmt.Errorf("ruby: read %s: %w", s.Name, err)
		}
		for ; len(b) >= 24; b = b[24:] {
			if uint32(binary.LittleEndian.Uint64(b[8:])) == typ {
				out = append(out, reloc{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[16:])})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the file has no relative relocations (not a shared library, or packed ones)", ErrNoEntry)
	}
	slices.SortFunc(out, func(x, y reloc) int {
		if x.Off < y.Off {
			return -1
		}
		if x.Off > y.Off {
			return 1
		}
		return 0
	})
	return out, nil
}
