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

func sameKernelRule(a, b bpf.CpuUnwindRow) bool {
	a.Pc = b.Pc
	return a == b
}

// kernelRow converts one row, without its pc.
func kernelRow(r cfi.Row) bpf.CpuUnwindRow {
	unsupported := bpf.CpuUnwindRow{Kind: kindUnsupported}
	switch r.Kind {
	case cfi.KindNoCFI:
		return bpf.CpuUnwindRow{Kind: kindNoCFI}
	case cfi.KindStop:
		return bpf.CpuUnwindRow{Kind: kindStop}
	case cfi.KindCFA:
		reg := uint8(regSP)
		switch r.CFAReg {
		case cfi.RegSP:
		case cfi.RegFP:
			reg = regFP
		default:
			return unsupported
		}
		if r.RAOffset != raOffset || !fitsInt16(int64(r.FPOffset)) {
			return unsupported
		}
		return bpf.CpuUnwindRow{Kind: kindCFA, CfaReg: reg, CfaOffset: r.CFAOffset, FpOffset: int16(r.FPOffset)}
	case cfi.KindPLT:
		if r.CFAReg != cfi.RegSP || r.RAOffset != raOffset || r.PLTEdge > 15 {
			return unsupported
		}
		// The edge of the entry's push travels in fp_offset (bpf/unwind.h).
		return bpf.CpuUnwindRow{Kind: kindPLT, CfaOffset: r.CFAOffset, FpOffset: int16(r.PLTEdge)}
	case cfi.KindSignal:
		if r.CFAOffset != sigframeRSP || r.RAOffset != sigframeRIP || r.FPOffset != sigframeRBP {
			return unsupported
		}
		return bpf.CpuUnwindRow{Kind: kindSignal}
	}
	return unsupported
}
