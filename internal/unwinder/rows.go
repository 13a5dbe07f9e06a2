package unwinder

import (
	"debug/elf"
	"fmt"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
)

// What the BPF walk assumes of x86-64 rows (bpf/unwind.h); a row that
// says otherwise becomes an unsupported one.
const (
	raOffset       = -8  // the return address is at CFA-8
	sigframeRSP    = 160 // a signal frame's saved rsp, rip and rbp, from rsp
	sigframeRIP    = 168
	sigframeRBP    = 120
	maxTableLength = 1 << 32 // rows' pcs are 32-bit offsets from the table's base
)

// buildRows builds the table of f in the kernel's layout.
func buildRows(f *elf.File) ([]bpf.CpuUnwindRow, uint64, error) {
	t, err := cfi.Build(f)
	if err != nil {
		return nil, 0, err
	}
	return kernelRows(t.Rows)
}

// kernelRows converts rows (sorted by PC) to the kernel's layout: pcs
// relative to the first row's, which is returned as the base. A file whose
// rows are all KindNoCFI has no table (nil).
func kernelRows(rows []cfi.Row) ([]bpf.CpuUnwindRow, uint64, error) {
	useful := false
	for _, r := range rows {
		if r.Kind != cfi.KindNoCFI {
			useful = true
			break
		}
	}
	if !useful {
		return nil, 0, nil
	}
	base := rows[0].PC
	if last := rows[len(rows)-1].PC; last-base >= maxTableLength {
		return nil, 0, fmt.Errorf("CFI spans %#x bytes, more than a table covers", last-base)
	}
	out := make([]bpf.CpuUnwindRow, 0, len(rows))
	for _, r := range rows {
		kr := kernelRow(r)
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

// kernelRow converts one row, without its pc.
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
