package unwinder

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
)

func TestKernelRow(t *testing.T) {
	unsupported := bpf.CpuUnwindRow{Kind: kindUnsupported}
	for _, tt := range []struct {
		name string
		in   cfi.Row
		want bpf.CpuUnwindRow
	}{
		{"no CFI", cfi.Row{Kind: cfi.KindNoCFI}, bpf.CpuUnwindRow{Kind: kindNoCFI}},
		{"stop", cfi.Row{Kind: cfi.KindStop}, bpf.CpuUnwindRow{Kind: kindStop}},
		{"rsp+8", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 8, RAOffset: -8},
			bpf.CpuUnwindRow{Kind: kindCFA, CfaReg: regSP, CfaOffset: 8}},
		{"rbp+16, rbp saved", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegFP, CFAOffset: 16, RAOffset: -8, FPOffset: -16},
			bpf.CpuUnwindRow{Kind: kindCFA, CfaReg: regFP, CfaOffset: 16, FpOffset: -16}},
		{"large frame", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 1 << 20, RAOffset: -8},
			bpf.CpuUnwindRow{Kind: kindCFA, CfaReg: regSP, CfaOffset: 1 << 20}},
		{"rbp saved out of reach", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 8, RAOffset: -8, FPOffset: 1 << 20}, unsupported},
		{"return address elsewhere", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 16, RAOffset: -16}, unsupported},
		{"CFA on another register", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegNone, CFAOffset: 8, RAOffset: -8}, unsupported},
		{"lazy PLT", cfi.Row{Kind: cfi.KindPLT, CFAReg: cfi.RegSP, CFAOffset: 8, PLTEdge: 11, RAOffset: -8},
			bpf.CpuUnwindRow{Kind: kindPLT, CfaOffset: 8, FpOffset: 11}},
		{"IBT PLT", cfi.Row{Kind: cfi.KindPLT, CFAReg: cfi.RegSP, CFAOffset: 8, PLTEdge: 10, RAOffset: -8},
			bpf.CpuUnwindRow{Kind: kindPLT, CfaOffset: 8, FpOffset: 10}},
		{"glibc signal frame", cfi.Row{Kind: cfi.KindSignal, CFAOffset: 160, RAOffset: 168, FPOffset: 120}, bpf.CpuUnwindRow{Kind: kindSignal}},
		{"other signal frame", cfi.Row{Kind: cfi.KindSignal, CFAOffset: 96, RAOffset: 104, FPOffset: 56}, unsupported},
		{"unsupported", cfi.Row{Kind: cfi.KindUnsupported}, unsupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kernelRow(tt.in))
		})
	}
}

func TestKernelRows(t *testing.T) {
	cfa := func(pc uint64, off int32) cfi.Row {
		return cfi.Row{PC: pc, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: off, RAOffset: -8}
	}
	rows, base, err := kernelRows([]cfi.Row{
		cfa(0x401000, 8), cfa(0x401004, 16),
		{PC: 0x401010, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 16, RAOffset: -8, FPOffset: 1 << 20}, // unsupported
		{PC: 0x401020, Kind: cfi.KindUnsupported},                                                            // merges with the one before
		{PC: 0x401030},
	})
	require.NoError(t, err)
	assert.Equal(t, uint64(0x401000), base)
	assert.Equal(t, []bpf.CpuUnwindRow{
		{Pc: 0, Kind: kindCFA, CfaReg: regSP, CfaOffset: 8},
		{Pc: 4, Kind: kindCFA, CfaReg: regSP, CfaOffset: 16},
		{Pc: 0x10, Kind: kindUnsupported},
		{Pc: 0x30, Kind: kindNoCFI},
	}, rows)

	rows, _, err = kernelRows([]cfi.Row{{PC: 0x1000}, {PC: 0x2000}})
	require.NoError(t, err)
	assert.Nil(t, rows, "a file without CFI has no table")

	_, _, err = kernelRows([]cfi.Row{cfa(0x1000, 8), cfa(0x1000+1<<32, 8)})
	assert.Error(t, err, "rows 4 GiB apart do not fit 32-bit pcs")
}
