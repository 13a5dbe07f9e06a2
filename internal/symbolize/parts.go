package symbolize

import (
	"debug/elf"
	"sort"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// entryFunctions are the runtimes' native entry functions: the native
// frames whose place runs of runtime frames take (internal/assemble), so
// they must be named wherever their code is.
var entryFunctions = func() []string {
	var names []string
	for _, rt := range all.Runtimes {
		if rt.EntryFunction != "" {
			names = append(names, rt.EntryFunction)
		}
	}
	return names
}()

// definesEntryFunction says whether src defines one of entryFunctions.
func definesEntryFunction(src rawSymbols) bool {
	for _, name := range entryFunctions {
		if _, ok := src.findSym(name); ok {
			return true
		}
	}
	return false
}

// unnamedEntryParts returns, for each runtime of rts with an EntryRange
// whose exports src defines, its entry function's range when no symbol of
// syms names it: the whole function, found by the runtime's own reading of
// f (Ruby's vm_exec_core in Debian's stripped libruby).
func unnamedEntryParts(rts []*runtimes.Runtime, f *elf.File, syms *symbolTable, src rawSymbols) []splitPart {
	var parts []splitPart
	for _, rt := range rts {
		if rt.EntryRange == nil || !definesAny(src, rt.Exports) {
			continue
		}
		lo, hi, err := rt.EntryRange(f)
		if err != nil || lo >= hi || syms.lookup(lo) != "" {
			continue
		}
		parts = append(parts, splitPart{lo, hi, rt.EntryFunction})
	}
	return parts
}

// holdsUnnamedEntry says whether src defines the exports of a runtime of
// rts whose entry function a symbol table may not name (Runtime.EntryRange).
func holdsUnnamedEntry(rts []*runtimes.Runtime, src rawSymbols) bool {
	for _, rt := range rts {
		if rt.EntryRange != nil && definesAny(src, rt.Exports) {
			return true
		}
	}
	return false
}

func definesAny(src rawSymbols, names []string) bool {
	for _, name := range names {
		if _, ok := src.findSym(name); ok {
			return true
		}
	}
	return false
}

// maxEntryFunctionBytes bounds the code of an entry function decoded.
const maxEntryFunctionBytes = 1 << 20

// splitPart is code of a function the compiler placed apart from its entry
// (GCC's hot/cold partitioning under profile-guided optimisation, as in
// Debian's CPython 3.14: the 1 KiB _PyEval_EvalFrameDefault jumps into an
// 84 KiB part that runs the bytecode). A stripped file has no symbol for
// it, so its frames would be unnamed.
type splitPart struct {
	lo, hi uint64
	name   string
}

// findSplitParts returns the parts of the entry functions src defines that
// no symbol of syms names: the FDE ranges its code
// jumps into the middle of. A jump, not a call, into another FDE's range
// continues the same function (a tail call jumps to a function's start).
func findSplitParts(f *elf.File, syms *symbolTable, src rawSymbols) []splitPart {
	var parts []splitPart
	var ranges []cfi.Range
	for _, name := range entryFunctions {
		s, ok := src.findSym(name)
		if !ok || s.size == 0 || s.size > maxEntryFunctionBytes {
			continue
		}
		code, ok := codeAt(f, s.value, s.size)
		if !ok {
			continue
		}
		if ranges == nil {
			var err error
			if ranges, err = cfi.FunctionRanges(f); err != nil || len(ranges) == 0 {
				return nil
			}
		}
		for _, t := range jumpTargets(f.Machine, s.value, code) {
			if t >= s.value && t < s.value+s.size {
				continue
			}
			i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Start > t }) - 1
			if i < 0 || t == ranges[i].Start || t >= ranges[i].End || syms.lookup(t) != "" {
				continue
			}
			p := splitPart{ranges[i].Start, ranges[i].End, name}
			if !containsPart(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	return parts
}

func containsPart(parts []splitPart, p splitPart) bool {
	for _, q := range parts {
		if q.lo == p.lo {
			return true
		}
	}
	return false
}

// codeAt returns size bytes of code at link-time address addr, from the
// PT_LOAD segment holding them.
func codeAt(f *elf.File, addr, size uint64) ([]byte, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || addr < p.Vaddr || addr-p.Vaddr+size > p.Filesz {
			continue
		}
		b := make([]byte, size)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, false
		}
		return b, true
	}
	return nil, false
}

// jumpTargets decodes code (at addr) and returns the targets of its direct
// jumps, conditional or not; calls are left out. Bytes that do not decode
// are stepped over.
func jumpTargets(machine elf.Machine, addr uint64, code []byte) []uint64 {
	var out []uint64
	switch machine {
	case elf.EM_X86_64:
		for off := 0; off < len(code); {
			inst, err := x86asm.Decode(code[off:], 64)
			if err != nil || inst.Len == 0 {
				off++
				continue
			}
			if rel, ok := inst.Args[0].(x86asm.Rel); ok && isX86Jump(inst.Op) {
				out = append(out, uint64(int64(addr)+int64(off+inst.Len)+int64(rel)))
			}
			off += inst.Len
		}
	case elf.EM_AARCH64:
		for off := 0; off+4 <= len(code); off += 4 {
			inst, err := arm64asm.Decode(code[off:])
			if err != nil || inst.Op == arm64asm.BL {
				continue
			}
			switch inst.Op {
			case arm64asm.B, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ:
				for _, a := range inst.Args {
					if rel, ok := a.(arm64asm.PCRel); ok {
						out = append(out, uint64(int64(addr)+int64(off)+int64(rel)))
					}
				}
			}
		}
	}
	return out
}

// isX86Jump says whether op is JMP or a conditional jump.
func isX86Jump(op x86asm.Op) bool {
	switch op {
	case x86asm.JMP, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS,
		x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS:
		return true
	}
	return false
}

// partAt returns the name of the split part holding vaddr, or "".
func partAt(parts []splitPart, vaddr uint64) string {
	for _, p := range parts {
		if vaddr >= p.lo && vaddr < p.hi {
			return p.name
		}
	}
	return ""
}
