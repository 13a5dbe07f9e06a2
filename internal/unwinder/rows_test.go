package unwinder

import (
	"debug/elf"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
)

// row builds the expected kernel row of a rule.
func row(kind uint32, cfaOnFP bool, field, cfaOffset int32) bpf.CpuUnwindRow {
	rl, ok := rule(kind, cfaOnFP, field, cfaOffset)
	if !ok {
		panic("rule out of range")
	}
	return bpf.CpuUnwindRow{Rule: rl}
}

func TestRulePacking(t *testing.T) {
	for _, tt := range []struct {
		kind             uint32
		fp               bool
		field, cfaOffset int32
		want             uint32
		ok               bool
	}{
		{kindCFA, false, 0, 8, 1 | 8<<12, true},
		{kindCFA, true, -2, 16, 1 | 1<<3 | 0xfe<<4 | 16<<12, true},
		{kindPLT, false, 11, 8, 2 | 11<<4 | 8<<12, true},
		{kindCFA, false, 0, -8, 1 | 0xffff8<<12, true},
		{kindCFA, false, 0, maxCFAOffset, 1 | maxCFAOffset<<12, true},
		{kindCFA, false, 0, maxCFAOffset + 1, 0, false},
		{kindCFA, false, 0, -maxCFAOffset - 2, 0, false},
		{kindCFA, false, 128, 8, 0, false},
		{kindCFA, false, -129, 8, 0, false},
	} {
		got, ok := rule(tt.kind, tt.fp, tt.field, tt.cfaOffset)
		assert.Equal(t, tt.ok, ok, "%+v", tt)
		assert.Equal(t, tt.want, got, "%+v", tt)
		if ok { // what bpf/unwind.h's ROW_* macros read back
			assert.Equal(t, tt.kind, got&7)
			assert.Equal(t, tt.fp, got&ruleCFAOnFP != 0)
			assert.Equal(t, tt.field, int32(got<<20)>>24)
			assert.Equal(t, tt.cfaOffset, int32(got)>>12)
		}
	}
}

func TestKernelRow(t *testing.T) {
	unsupported := bpf.CpuUnwindRow{Rule: kindUnsupported}
	for _, tt := range []struct {
		name string
		in   cfi.Row
		want bpf.CpuUnwindRow
	}{
		{"no CFI", cfi.Row{Kind: cfi.KindNoCFI}, bpf.CpuUnwindRow{Rule: kindNoCFI}},
		{"stop", cfi.Row{Kind: cfi.KindStop}, bpf.CpuUnwindRow{Rule: kindStop}},
		{"rsp+8", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 8, RAOffset: -8}, row(kindCFA, false, 0, 8)},
		{"rbp+16, rbp saved", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegFP, CFAOffset: 16, RAOffset: -8, FPOffset: -16},
			row(kindCFA, true, -2, 16)},
		{"large frame", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 1 << 18, RAOffset: -8}, row(kindCFA, false, 0, 1<<18)},
		{"frame out of reach", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 1 << 20, RAOffset: -8}, unsupported},
		{"rbp saved out of reach", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 8, RAOffset: -8, FPOffset: 1 << 20}, unsupported},
		{"rbp saved unaligned", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 8, RAOffset: -8, FPOffset: -12}, unsupported},
		{"return address elsewhere", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 16, RAOffset: -16}, unsupported},
		{"CFA on another register", cfi.Row{Kind: cfi.KindCFA, CFAReg: cfi.RegNone, CFAOffset: 8, RAOffset: -8}, unsupported},
		{"lazy PLT", cfi.Row{Kind: cfi.KindPLT, CFAReg: cfi.RegSP, CFAOffset: 8, PLTEdge: 11, RAOffset: -8}, row(kindPLT, false, 11, 8)},
		{"IBT PLT", cfi.Row{Kind: cfi.KindPLT, CFAReg: cfi.RegSP, CFAOffset: 8, PLTEdge: 10, RAOffset: -8}, row(kindPLT, false, 10, 8)},
		{"glibc signal frame", cfi.Row{Kind: cfi.KindSignal, CFAOffset: 160, RAOffset: 168, FPOffset: 120}, bpf.CpuUnwindRow{Rule: kindSignal}},
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
	rows, base, err := kernelRows(elf.EM_X86_64, slices.Values([]cfi.Row{
		cfa(0x401000, 8), cfa(0x401004, 16),
		{PC: 0x401010, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 16, RAOffset: -8, FPOffset: 1 << 20}, // unsupported
		{PC: 0x401020, Kind: cfi.KindUnsupported},                                                            // merges with the one before
		{PC: 0x401030},
	}))
	require.NoError(t, err)
	assert.Equal(t, uint64(0x401000), base)
	assert.Equal(t, []bpf.CpuUnwindRow{
		{Pc: 0, Rule: row(kindCFA, false, 0, 8).Rule},
		{Pc: 4, Rule: row(kindCFA, false, 0, 16).Rule},
		{Pc: 0x10, Rule: kindUnsupported},
		{Pc: 0x30, Rule: kindNoCFI},
	}, rows)

	rows, _, err = kernelRows(elf.EM_X86_64, slices.Values([]cfi.Row{{PC: 0x1000}, {PC: 0x2000}}))
	require.NoError(t, err)
	assert.Nil(t, rows, "a file without CFI has no table")

	_, _, err = kernelRows(elf.EM_X86_64, slices.Values([]cfi.Row{cfa(0x1000, 8), cfa(0x1000+1<<32, 8)}))
	assert.Error(t, err, "rows 4 GiB apart do not fit 32-bit pcs")

	_, _, err = kernelRows(elf.EM_RISCV, slices.Values([]cfi.Row{cfa(0x1000, 8), {PC: 0x1010}}))
	assert.Error(t, err, "a machine without a layout")
}

// rowARM64 builds the expected kernel row of an arm64 rule.
func rowARM64(cfaOnFP bool, fpSlot, raSlot, cfaOffset int32) bpf.CpuUnwindRow {
	rl, ok := ruleARM64(kindCFA, cfaOnFP, fpSlot, raSlot, cfaOffset)
	if !ok {
		panic("rule out of range")
	}
	return bpf.CpuUnwindRow{Rule: rl}
}

func TestRulePackingARM64(t *testing.T) {
	const maxCFA = arm64MaxCFAOffset * arm64CFAUnit
	const maxRecordCFA = arm64MaxRecordCFAOffset * arm64CFAUnit
	for _, tt := range []struct {
		fp                      bool
		fpSlot, raSlot, cfaOffs int32
		want                    uint32
		ok                      bool
	}{
		{false, 0, 0, 0, 1, true},
		{false, -16, -24, 32, 1 | 0xfe<<4 | 0xfd<<12 | 2<<20, true},
		{true, -16, -8, 16, 1 | 1<<3 | 0x80<<4 | 1<<12, true},
		{false, 0, 0, -16, 1 | 0xfff<<20, true},
		{false, 0, 0, maxCFA, 1 | arm64MaxCFAOffset<<20, true},
		{false, 0, 0, -maxCFA - 16, 1 | 0x800<<20, true},
		{false, -1008, 1016, 16, 1 | 0x82<<4 | 0x7f<<12 | 1<<20, true},
		// The frame record at the CFA register: the CFA offset in bits 12-31.
		{false, -32, -24, 32, 1 | 0x80<<4 | 2<<12, true},
		{true, -2976, -2968, 2976, 1 | 1<<3 | 0x80<<4 | 186<<12, true},
		{false, -maxRecordCFA, -maxRecordCFA + 8, maxRecordCFA, 1 | 0x80<<4 | arm64MaxRecordCFAOffset<<12, true},
		{false, -maxRecordCFA - 16, -maxRecordCFA - 8, maxRecordCFA + 16, 0, false},
		// x30 alone at the CFA register (-O2 -fomit-frame-pointer, a 4 KiB array).
		{false, 0, -4112, 4112, 1 | 0x81<<4 | 257<<12, true},
		{false, -1016, 0, 16, 0, false},
		{false, 0, 0, maxCFA + 16, 0, false},
		{false, 0, 0, -maxCFA - 32, 0, false},
		{false, 0, 0, 8, 0, false},
		{false, -1024, 0, 16, 0, false},
		{false, 0, 1024, 16, 0, false},
		{false, -12, 0, 16, 0, false},
		{false, 0, -4, 16, 0, false},
	} {
		got, ok := ruleARM64(kindCFA, tt.fp, tt.fpSlot, tt.raSlot, tt.cfaOffs)
		assert.Equal(t, tt.ok, ok, "%+v", tt)
		assert.Equal(t, tt.want, got, "%+v", tt)
		if ok { // what bpf/unwind.h's ROW_* macros read back on arm64
			reg := cfi.RegSP
			if tt.fp {
				reg = cfi.RegFP
			}
			want := cfi.Row{Kind: cfi.KindCFA, CFAReg: reg, CFAOffset: tt.cfaOffs, FPOffset: tt.fpSlot, RAOffset: tt.raSlot}
			assert.Equal(t, want, unpackARM64(got), "%+v", tt)
		}
	}
}

func TestKernelRowARM64(t *testing.T) {
	unsupported := bpf.CpuUnwindRow{Rule: kindUnsupported}
	cfa := func(reg cfi.Reg, off, fp, ra int32) cfi.Row {
		return cfi.Row{Kind: cfi.KindCFA, CFAReg: reg, CFAOffset: off, FPOffset: fp, RAOffset: ra}
	}
	for _, tt := range []struct {
		name string
		in   cfi.Row
		want bpf.CpuUnwindRow
	}{
		{"no CFI", cfi.Row{Kind: cfi.KindNoCFI}, bpf.CpuUnwindRow{Rule: kindNoCFI}},
		{"stop", cfi.Row{Kind: cfi.KindStop}, bpf.CpuUnwindRow{Rule: kindStop}},
		{"leaf: sp+0, return address in x30", cfa(cfi.RegSP, 0, 0, 0), rowARM64(false, 0, 0, 0)},
		{"stp x29, x30, [sp, #-32]!", cfa(cfi.RegSP, 32, -32, -24), rowARM64(false, -32, -24, 32)},
		{"CFA on x29", cfa(cfi.RegFP, 16, -16, -8), rowARM64(true, -16, -8, 16)},
		{"lazy PLT header after its push", cfa(cfi.RegSP, 16, 0, 0), rowARM64(false, 0, 0, 16)},
		{"largest frame", cfa(cfi.RegSP, 32752, -16, -8), rowARM64(false, -16, -8, 32752)},
		{"frame out of reach", cfa(cfi.RegSP, 32768, -16, -8), unsupported},
		{"large frame, its record at its bottom", cfa(cfi.RegSP, 33392, -33392, -33384), rowARM64(false, -33392, -33384, 33392)},
		{"CFA offset not in 16-byte units", cfa(cfi.RegSP, 24, 0, 0), unsupported},
		{"x29 saved out of reach", cfa(cfi.RegSP, 2048, -1040, -8), unsupported},
		{"x30 saved out of reach", cfa(cfi.RegSP, 2048, -16, -1032), unsupported},
		{"x30 saved unaligned", cfa(cfi.RegSP, 32, -32, -20), unsupported},
		{"CFA on another register", cfa(cfi.RegNone, 0, 0, 0), unsupported},
		{"a PLT row has no arm64 layout", cfi.Row{Kind: cfi.KindPLT, CFAReg: cfi.RegSP, CFAOffset: 8, PLTEdge: 11, RAOffset: -8}, unsupported},
		{"a signal row neither", cfi.Row{Kind: cfi.KindSignal, CFAOffset: 160, RAOffset: 168, FPOffset: 120}, unsupported},
		{"unsupported", cfi.Row{Kind: cfi.KindUnsupported}, unsupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kernelRowARM64(tt.in))
		})
	}
}

func TestKernelRowsARM64(t *testing.T) {
	rows, base, err := kernelRows(elf.EM_AARCH64, slices.Values([]cfi.Row{
		{PC: 0x10000, Kind: cfi.KindCFA, CFAReg: cfi.RegSP},
		{PC: 0x10004, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 32, FPOffset: -32, RAOffset: -24},
		{PC: 0x10010, Kind: cfi.KindCFA, CFAReg: cfi.RegSP, CFAOffset: 1 << 16, FPOffset: -32, RAOffset: -24}, // unsupported
		{PC: 0x10014, Kind: cfi.KindUnsupported},                                                              // merges with the one before
		{PC: 0x10020, Kind: cfi.KindStop},
		{PC: 0x10030},
	}))
	require.NoError(t, err)
	assert.Equal(t, uint64(0x10000), base)
	assert.Equal(t, []bpf.CpuUnwindRow{
		{Pc: 0, Rule: rowARM64(false, 0, 0, 0).Rule},
		{Pc: 4, Rule: rowARM64(false, -32, -24, 32).Rule},
		{Pc: 0x10, Rule: kindUnsupported},
		{Pc: 0x20, Rule: kindStop},
		{Pc: 0x30, Rule: kindNoCFI},
	}, rows)
}
