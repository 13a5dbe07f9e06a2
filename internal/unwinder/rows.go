package unwinder

import (
	"debug/elf"
	"fmt"
	"iter"
	"runtime"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
)

// What the BPF walk assumes of x86-64 rows (bpf/unwind.h); a row that
// says otherwise becomes an unsupported one.
const (
	raOffset       = -8  // the return address is at CFA-8
	sigframeRSP    = 160 // a signal frame's saved rsp, rip and rbp, from rsp (bpf/arch.h SIGFRAME_*)
	sigframeRIP    = 168
	sigframeRBP    = 120
	maxTableLength = 1 << 32 // rows' pcs are 32-bit offsets from the table's base
)

// hostMachine is the machine of the programs the BPF walk reads: tables
// are built for files of that machine only (the layouts differ).
var hostMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// buildRows builds the table of f in the kernel's layout for its machine,
// which must be the host's.
func buildRows(f *elf.File) ([]bpf.CpuUnwindRow, uint64, error) {
	if f.Machine != hostMachine {
		return nil, 0, fmt.Errorf("a %v file on a %v host: no table", f.Machine, hostMachine)
	}
	rows, err := cfi.BuildRows(f)
	if err != nil {
		return nil, 0, err
	}
	return kernelRows(f.Machine, rows.All())
}

// kernelRowOf returns the row conversion of machine's layout, or nil.
func kernelRowOf(m elf.Machine) func(cfi.Row) bpf.CpuUnwindRow {
	switch m {
	case elf.EM_X86_64:
		return kernelRow
	case elf.EM_AARCH64:
		return kernelRowARM64
	}
	return nil
}

// kernelRows converts rows (by PC) of a file of machine m to the
// kernel's layout: pcs relative to the first row's, which is returned as
// the base. A file whose rows are all KindNoCFI has no table (nil). rows
// is read twice: once to size the table, once to fill it.
func kernelRows(m elf.Machine, rows iter.Seq[cfi.Row]) ([]bpf.CpuUnwindRow, uint64, error) {
	convert := kernelRowOf(m)
	if convert == nil {
		return nil, 0, fmt.Errorf("no unwind row layout for %v", m)
	}
	n, useful := 0, false
	var base, last uint64
	for r := range rows {
		if n == 0 {
			base = r.PC
		}
		n++
		last = r.PC
		useful = useful || r.Kind != cfi.KindNoCFI
	}
	if !useful {
		return nil, 0, nil
	}
	if last-base >= maxTableLength {
		return nil, 0, fmt.Errorf("CFI spans %#x bytes, more than a table covers", last-base)
	}
	out := make([]bpf.CpuUnwindRow, 0, n)
	for r := range rows {
		kr := convert(r)
		kr.Pc = uint32(r.PC - base)
		// Rows that convert alike merge (the first one's pc stays).
		if n := len(out); n > 0 && sameKernelRule(out[n-1], kr) {
			continue
		}
		out = append(out, kr)
	}
	return out, base, nil
}

func sameKernelRule(a, b bpf.CpuUnwindRow) bool { return a.Rule == b.Rule }

// The packing of a row's rule (bpf/unwind.h struct unwind_row): kind in
// bits 0-2, CFA on rbp in bit 3, a signed 8-bit field in bits 4-11, the
// signed 20-bit CFA offset in bits 12-31.
const (
	ruleCFAOnFP    = 1 << 3
	ruleFieldShift = 4
	ruleCFAShift   = 12
	maxRuleField   = 1<<7 - 1
	maxCFAOffset   = 1<<19 - 1
)

// rule packs a row's rule; false when field or cfaOffset do not fit.
func rule(kind uint32, cfaOnFP bool, field, cfaOffset int32) (uint32, bool) {
	if field < -maxRuleField-1 || field > maxRuleField || cfaOffset < -maxCFAOffset-1 || cfaOffset > maxCFAOffset {
		return 0, false
	}
	r := kind | uint32(uint8(int8(field)))<<ruleFieldShift | uint32(cfaOffset)<<ruleCFAShift
	if cfaOnFP {
		r |= ruleCFAOnFP
	}
	return r, true
}

// kernelRow converts one x86-64 row, without its pc.
func kernelRow(r cfi.Row) bpf.CpuUnwindRow {
	unsupported := bpf.CpuUnwindRow{Rule: kindUnsupported}
	packed := func(kind uint32, cfaOnFP bool, field, cfaOffset int32) bpf.CpuUnwindRow {
		rl, ok := rule(kind, cfaOnFP, field, cfaOffset)
		if !ok {
			return unsupported
		}
		return bpf.CpuUnwindRow{Rule: rl}
	}
	switch r.Kind {
	case cfi.KindNoCFI:
		return bpf.CpuUnwindRow{Rule: kindNoCFI}
	case cfi.KindStop:
		return bpf.CpuUnwindRow{Rule: kindStop}
	case cfi.KindCFA:
		if (r.CFAReg != cfi.RegSP && r.CFAReg != cfi.RegFP) || r.RAOffset != raOffset || r.FPOffset%8 != 0 {
			return unsupported
		}
		// Where rbp is saved travels in words.
		return packed(kindCFA, r.CFAReg == cfi.RegFP, r.FPOffset/8, r.CFAOffset)
	case cfi.KindPLT:
		if r.CFAReg != cfi.RegSP || r.RAOffset != raOffset || r.PLTEdge > 15 {
			return unsupported
		}
		// The edge of the entry's push travels in the field (bpf/unwind.h).
		return packed(kindPLT, false, int32(r.PLTEdge), r.CFAOffset)
	case cfi.KindSignal:
		if r.CFAOffset != sigframeRSP || r.RAOffset != sigframeRIP || r.FPOffset != sigframeRBP {
			return unsupported
		}
		return bpf.CpuUnwindRow{Rule: kindSignal}
	}
	return unsupported
}

// The arm64 packing of a row's rule (bpf/unwind.h): kind in bits 0-2, CFA
// on x29 in bit 3, where x29 and where x30 are saved (in words from the
// CFA, 0: not saved) in signed 8-bit fields at bits 4-11 and 12-19, the
// signed 12-bit CFA offset in 16-byte units (sp stays 16-byte aligned) in
// bits 20-31. A row whose frame record (x29, then x30) is at the CFA
// register itself, as at the bottom of a large frame, marks its x29 field
// arm64RecordAtBase and holds a signed 20-bit CFA offset in bits 12-31;
// one that saves x30 alone there (a large frame without a frame pointer)
// marks it arm64LRAtBase, alike.
const (
	arm64FPShift      = 4
	arm64RAShift      = 12
	arm64CFAShift     = 20
	arm64MaxSlot      = 1<<7 - 1  // words; -128 and -127 mark the rows at the CFA register
	arm64MaxCFAOffset = 1<<11 - 1 // 16-byte units
	arm64CFAUnit      = 16

	arm64RecordAtBase       = -128
	arm64LRAtBase           = -127
	arm64RecordCFAShift     = 12
	arm64MaxRecordCFAOffset = 1<<19 - 1 // 16-byte units
)

// ruleARM64 packs an arm64 row's rule from byte offsets; false when one is
// not a multiple of its unit or does not fit.
func ruleARM64(kind uint32, cfaOnFP bool, fpSlot, raSlot, cfaOffset int32) (uint32, bool) {
	var r uint32
	if atBase := atBaseMark(fpSlot, raSlot, cfaOffset); atBase != 0 {
		cfa, ok := units(cfaOffset, arm64CFAUnit, -arm64MaxRecordCFAOffset-1, arm64MaxRecordCFAOffset)
		if !ok {
			return 0, false
		}
		r = kind | uint32(atBase&0xff)<<arm64FPShift | uint32(cfa)<<arm64RecordCFAShift
	} else {
		fp, ok1 := units(fpSlot, 8, -arm64MaxSlot+1, arm64MaxSlot)
		ra, ok2 := units(raSlot, 8, -arm64MaxSlot, arm64MaxSlot)
		cfa, ok3 := units(cfaOffset, arm64CFAUnit, -arm64MaxCFAOffset-1, arm64MaxCFAOffset)
		if !ok1 || !ok2 || !ok3 {
			return 0, false
		}
		r = kind | uint32(uint8(int8(fp)))<<arm64FPShift | uint32(uint8(int8(ra)))<<arm64RAShift | uint32(cfa)<<arm64CFAShift
	}
	if cfaOnFP {
		r |= ruleCFAOnFP
	}
	return r, true
}

// atBaseMark returns the x29 field's mark of a row whose saved registers
// are at the CFA register itself (the bottom of its frame), or 0.
func atBaseMark(fpSlot, raSlot, cfaOffset int32) int32 {
	switch {
	case cfaOffset == 0 || raSlot == 0:
		return 0
	case fpSlot == -cfaOffset && raSlot == fpSlot+8:
		return arm64RecordAtBase
	case fpSlot == 0 && raSlot == -cfaOffset:
		return arm64LRAtBase
	}
	return 0
}

// units returns off, in bytes, in units of unit; false unless a multiple
// of unit within [lo, hi] units.
func units(off, unit, lo, hi int32) (int32, bool) {
	u := off / unit
	return u, off%unit == 0 && u >= lo && u <= hi
}

// kernelRowARM64 converts one aarch64 row, without its pc. There are no PLT
// nor signal rows on arm64 (cfi gives the PLT CFA rows).
func kernelRowARM64(r cfi.Row) bpf.CpuUnwindRow {
	switch r.Kind {
	case cfi.KindNoCFI:
		return bpf.CpuUnwindRow{Rule: kindNoCFI}
	case cfi.KindStop:
		return bpf.CpuUnwindRow{Rule: kindStop}
	case cfi.KindCFA:
		if r.CFAReg != cfi.RegSP && r.CFAReg != cfi.RegFP {
			break
		}
		if rl, ok := ruleARM64(kindCFA, r.CFAReg == cfi.RegFP, r.FPOffset, r.RAOffset, r.CFAOffset); ok {
			return bpf.CpuUnwindRow{Rule: rl}
		}
	}
	return bpf.CpuUnwindRow{Rule: kindUnsupported}
}
