package php

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"sort"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// JITFrame returns how the native walker unwinds a pc in opcache's JIT
// buffer, for the engine file f (php, php-fpm, libphp) and its CFI rows
// (cfi.BuildRows of f, by PC): the CFI row of
// execute_ex's body, the row covering most of execute_ex's bytes (its
// PC is execute_ex's first pc under that rule), on arm64 made relative to
// x29 (see below).
//
// With Debian's hybrid VM, JIT code is entered from execute_ex by a jmp,
// makes no native frame of its own and runs on execute_ex's: its stack
// pointer (and, where execute_ex keeps a frame pointer, its frame
// pointer) is execute_ex's after the prologue (on arm64 only x29 is:
// the JIT lowers sp), so the CFA, the return
// address into execute_ex's caller (zend_execute, zend_call_function...)
// and the caller's saved frame pointer are where execute_ex's body row
// says (docs/php-layouts.md, "Unwinding JIT code": measured with gdb at
// interruptions in JIT code of 8.2 and 8.4, jit=function and tracing).
// A pc in a helper called from JIT code unwinds through the helper's own
// CFI to a return address in the JIT buffer, then through this row.
func JITFrame(f *elf.File, rows iter.Seq[cfi.Row]) (cfi.Row, error) {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: []string{entryFunction}})
	if err != nil {
		return cfi.Row{}, fmt.Errorf("PHP JIT frame: %w", err)
	}
	var lo, hi uint64
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && s.Value != 0 && s.Size != 0 {
			lo, hi = s.Value, s.Value+s.Size
		}
	}
	if hi == 0 {
		return cfi.Row{}, fmt.Errorf("PHP JIT frame: no %s with a size", entryFunction)
	}
	row, err := bodyRow(rows, lo, hi)
	if err != nil || f.Machine != elf.EM_AARCH64 || row.CFAReg == cfi.RegFP {
		return row, err
	}
	// arm64: JIT code moves sp below execute_ex's (8.2's JIT by 32 bytes,
	// 8.4's by 48) but keeps x29, which execute_ex points at its frame
	// record (the saved x29 and x30): unwind from x29.
	fp := int64(row.CFAOffset) + int64(row.FPOffset) // x29 - sp in the body
	if row.FPOffset == 0 || fp < 0 || fp >= 1<<12 {
		return cfi.Row{}, fmt.Errorf("PHP JIT frame: %s's body saves no frame record (%+v)", entryFunction, row)
	}
	if ok, err := setsFramePointer(f, lo, uint32(fp)); err != nil || !ok {
		return cfi.Row{}, fmt.Errorf("PHP JIT frame: no add x29, sp, #%d in %s's prologue (%v)", fp, entryFunction, err)
	}
	row.CFAReg, row.CFAOffset = cfi.RegFP, -row.FPOffset
	return row, nil
}

// prologueInsns is how many instructions of execute_ex setsFramePointer
// looks at (its prologue's add x29 is the 5th in 8.2).
const prologueInsns = 32

// setsFramePointer reports whether one of the first instructions of the
// arm64 function at addr is add x29, sp, #imm.
func setsFramePointer(f *elf.File, addr uint64, imm uint32) (bool, error) {
	var code [4 * prologueInsns]byte
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr+uint64(len(code)) > p.Vaddr+p.Filesz {
			continue
		}
		if _, err := p.ReadAt(code[:], int64(addr-p.Vaddr)); err != nil {
			return false, err
		}
		want := 0x910003fd | imm<<10 // ADD (immediate), 64-bit, Rn sp, Rd x29
		for i := 0; i < len(code); i += 4 {
			if binary.LittleEndian.Uint32(code[i:]) == want {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("%#x is in no loaded segment", addr)
}

// errNoBodyRow means execute_ex has no CFI row a JIT pc can use.
var errNoBodyRow = errors.New("PHP JIT frame: no CFA row covers execute_ex")

// bodyRow returns, of rows (sorted by PC), the KindCFA rule covering the
// most bytes of [lo, hi), with the PC of its first row there.
func bodyRow(rows func(func(cfi.Row) bool), lo, hi uint64) (cfi.Row, error) {
	type span struct {
		row   cfi.Row
		bytes uint64
	}
	var spans []span
	add := func(r cfi.Row, from, to uint64) {
		from, to = max(from, lo), min(to, hi)
		if r.Kind != cfi.KindCFA || from >= to {
			return
		}
		for i := range spans {
			if same := spans[i].row; same.Kind == r.Kind && same.CFAReg == r.CFAReg && same.CFAOffset == r.CFAOffset &&
				same.FPOffset == r.FPOffset && same.RAOffset == r.RAOffset {
				spans[i].bytes += to - from
				return
			}
		}
		r.PC = from
		spans = append(spans, span{r, to - from})
	}
	var prev cfi.Row
	have := false
	for r := range rows {
		if have {
			add(prev, prev.PC, r.PC)
		}
		if r.PC >= hi {
			have = false
			break
		}
		prev, have = r, true
	}
	if have {
		add(prev, prev.PC, hi)
	}
	if len(spans) == 0 {
		return cfi.Row{}, errNoBodyRow
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].bytes > spans[j].bytes })
	return spans[0].row, nil
}

// devZero is how /proc/PID/maps names a MAP_SHARED|MAP_ANONYMOUS mapping.
const devZero = "/dev/zero (deleted)"

// JITBuffers returns the executable pieces of opcache's JIT buffer in a
// process's mappings (procfs.ParseMaps of /proc/PID/maps), adjacent pieces
// merged: opcache maps its shared memory as one anonymous shared segment
// ("/dev/zero (deleted)", one inode), the cache first (offset 0, rw-s) and
// the JIT buffer after it (r-xs). So: the executable mappings of an inode
// of such a segment that also has its offset 0 mapped. None when the JIT
// is off (no buffer) or while the JIT writes the buffer (it is made
// writable, not executable, then). Bounded by the number of mappings.
func JITBuffers(maps []procfs.Map) []procfs.Map {
	segments := map[uint64]bool{} // inodes of shared /dev/zero segments mapped from offset 0
	for _, m := range maps {
		if shm(m) && m.Offset == 0 {
			segments[m.Inode] = true
		}
	}
	var out []procfs.Map
	for _, m := range maps {
		if !shm(m) || !m.Executable() || m.Offset == 0 || !segments[m.Inode] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End == m.Start && out[n-1].Inode == m.Inode {
			out[n-1].End = m.End
			continue
		}
		out = append(out, m)
	}
	return out
}

// inJITBuffer says whether the executable mapping m of a PHP process is
// (part of) opcache's JIT buffer, from m alone (JITBuffers checks the
// cache's mapping too): shared anonymous memory past the segment's start.
// Its code runs on execute_ex's frame (JITFrame).
func inJITBuffer(m procfs.Map) bool {
	return shm(m) && m.Executable() && m.Offset != 0
}

func shm(m procfs.Map) bool {
	return m.Path == devZero && len(m.Perms) == 4 && m.Perms[3] == 's'
}
