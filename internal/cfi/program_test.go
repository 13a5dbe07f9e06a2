package cfi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// Shorthands for expected rows.
func cfaRow(pc uint64, reg Reg, off, fp int32) Row {
	return Row{PC: pc, Kind: KindCFA, CFAReg: reg, CFAOffset: off, FPOffset: fp, RAOffset: -8}
}

func kindRow(pc uint64, k Kind) Row { return Row{PC: pc, Kind: k} }

// TestProgram evaluates hand-written CFA programs of one FDE covering
// [0x1000, 0x1100), whose CIE sets CFA = rsp+8 and ra at CFA-8 unless a
// case gives its own CIE instructions.
func TestProgram(t *testing.T) {
	const end = 0x1100
	tests := []struct {
		name     string
		aug      string // CIE augmentation; "zR" when empty
		cie      []byte // CIE initial instructions; stdCIE when nil
		fde      []byte
		want     []Row
		badProgs int
	}{{
		name: "frame pointer prologue and epilogue",
		fde: cat(advance(1), defCFAOffset(16), offset(6, 2), advance(3), defCFARegister(6),
			[]byte{0x02, 0x20}, defCFA(7, 8)), // advance_loc1 0x20
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, -16), cfaRow(0x1004, RegFP, 16, -16),
			cfaRow(0x1024, RegSP, 8, -16), kindRow(end, KindNoCFI)},
	}, {
		name: "remember and restore state around an early return",
		fde: cat(advance(1), defCFAOffset(16), offset(6, 2), advance(4), []byte{0x0a}, defCFAOffset(8),
			[]byte{0xc6}, advance(1), []byte{0x0b}, advance(2), defCFAOffset(8)),
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, -16), cfaRow(0x1005, RegSP, 8, 0),
			cfaRow(0x1006, RegSP, 16, -16), cfaRow(0x1008, RegSP, 8, -16), kindRow(end, KindNoCFI)},
	}, {
		name: "signed and extended forms, args_size, same_value, restore_extended",
		fde: cat([]byte{0x12, 7, 0x7e}, []byte{0x11, 6, 0x02}, []byte{0x2e, 0x10}, // def_cfa_sf, offset_extended_sf, args_size
			[]byte{0x03, 0x10, 0}, []byte{0x13, 0x7f}, // advance_loc2 0x10, def_cfa_offset_sf 8
			[]byte{0x04, 0x20, 0, 0, 0}, []byte{0x08, 6}, // advance_loc4 0x20, same_value rbp
			advance(8), []byte{0x05, 6, 3}, advance(8), []byte{0x06, 6}, // offset_extended rbp cfa-24, restore_extended
			advance(8), []byte{0x2f, 6, 0x04}), // GNU_negative_offset_extended: rbp at cfa+32
		want: []Row{cfaRow(0x1000, RegSP, 16, -16), cfaRow(0x1010, RegSP, 8, -16), cfaRow(0x1030, RegSP, 8, 0),
			cfaRow(0x1038, RegSP, 8, -24), cfaRow(0x1040, RegSP, 8, 0), cfaRow(0x1048, RegSP, 8, 32), kindRow(end, KindNoCFI)},
	}, {
		name: "an advance past the end ends the program",
		fde:  cat(defCFAOffset(16), []byte{0x02, 0xf0}, defCFAOffset(24), []byte{0x03, 0x00, 0x10}, defCFAOffset(32)),
		want: []Row{cfaRow(0x1000, RegSP, 16, 0), cfaRow(0x10f0, RegSP, 24, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "linker PLT: two plain rows then the expression",
		fde:  cat(defCFAOffset(16), advance(6), defCFAOffset(24), advance(10), pltExpression(11)),
		want: []Row{cfaRow(0x1000, RegSP, 16, 0), cfaRow(0x1006, RegSP, 24, 0),
			{PC: 0x1010, Kind: KindPLT, CFAReg: RegSP, CFAOffset: 8, RAOffset: -8, PLTEdge: 11}, kindRow(end, KindNoCFI)},
	}, {
		name: "IBT PLT edge",
		fde:  pltExpression(9),
		want: []Row{{PC: 0x1000, Kind: KindPLT, CFAReg: RegSP, CFAOffset: 8, RAOffset: -8, PLTEdge: 9}, kindRow(end, KindNoCFI)},
	}, {
		name: "glibc signal trampoline",
		aug:  "zRS",
		cie:  []byte{},
		fde: cat(cfaExpression(cat(bregRSP(160), []byte{0x06})...), expression(8, bregRSP(40)...),
			expression(6, bregRSP(120)...), expression(7, bregRSP(160)...), expression(16, bregRSP(168)...)),
		want: []Row{{PC: 0x1000, Kind: KindSignal, CFAReg: RegSP, CFAOffset: 160, FPOffset: 120, RAOffset: 168}, kindRow(end, KindNoCFI)},
	}, {
		name: "signal frame without the rbp slot is unsupported",
		fde:  cat(cfaExpression(cat(bregRSP(160), []byte{0x06})...), expression(16, bregRSP(168)...)),
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "undefined return address: outermost frame",
		fde:  cat(advance(4), []byte{0x07, 16}),
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1004, KindStop), kindRow(end, KindNoCFI)},
	}, {
		name: "CFA on r10 (stack realignment) is unsupported until it is back on rsp",
		fde:  cat(defCFA(10, 0), advance(4), defCFA(7, 8)),
		want: []Row{kindRow(0x1000, KindUnsupported), cfaRow(0x1004, RegSP, 8, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "unknown CFA expression: *(rsp-8)+8",
		fde:  cfaExpression(cat(bregRSP(-8), []byte{0x06, 0x23, 0x08})...),
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "rbp saved in a register, then as a value offset",
		fde:  cat([]byte{0x09, 6, 3}, advance(2), []byte{0x14, 6, 2}, advance(2), []byte{0x08, 6}),
		want: []Row{kindRow(0x1000, KindUnsupported), cfaRow(0x1004, RegSP, 8, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "return address in a register",
		fde:  []byte{0x09, 16, 3},
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "return address anywhere but CFA-8",
		fde:  cat(advance(1), offset(16, 2)),
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1001, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "CFA offset beyond int32",
		fde:  defCFA(7, 1<<40),
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name:     "restore_state without remember_state: the rest is unsupported",
		fde:      cat(advance(2), defCFAOffset(16), advance(2), []byte{0x0b}, advance(2), defCFAOffset(8)),
		want:     []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1002, RegSP, 16, 0), kindRow(0x1004, KindUnsupported), kindRow(end, KindNoCFI)},
		badProgs: 1,
	}, {
		name:     "unknown instruction",
		fde:      cat(advance(3), []byte{0x3e, 0}),
		want:     []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1003, KindUnsupported), kindRow(end, KindNoCFI)},
		badProgs: 1,
	}, {
		name:     "truncated operand",
		fde:      []byte{0x0c, 7},
		want:     []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
		badProgs: 1,
	}, {
		name:     "CIE instructions that advance make every FDE row unsupported",
		cie:      cat(stdCIE, advance(1)),
		fde:      defCFAOffset(16),
		want:     []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
		badProgs: 1,
	}, {
		name: "CIE without a return address rule",
		cie:  defCFA(7, 8),
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "personality and LSDA augmentation",
		aug:  "zPLR",
		fde:  cat(advance(1), defCFAOffset(16)),
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, 0), kindRow(end, KindNoCFI)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aug, cieInstr := tt.aug, tt.cie
			if aug == "" {
				aug = "zR"
			}
			if cieInstr == nil {
				cieInstr = stdCIE
			}
			a := frameAsm{addr: 0x400}
			a.fde(a.cie(aug, cieInstr...), 0x1000, end-0x1000, tt.fde...)
			table, err := buildSections(sources{arch: archX86, eh: ehSource{sec: a.section()}})
			require.NoError(t, err)
			require.Equal(t, tt.want, table.Rows)
			require.Equal(t, 1, table.Stats.FDEs)
			require.Equal(t, tt.badProgs, table.Stats.BadPrograms)
			checkInvariants(t, table)
		})
	}
}

func TestDebugFrameProgram(t *testing.T) {
	setLoc := func(pc uint64) []byte { return binary.LittleEndian.AppendUint64([]byte{0x01}, pc) }
	tests := []struct {
		name string
		fde  []byte
		want []Row
	}{{
		name: "push rbp",
		fde:  cat(advance(1), defCFAOffset(16), offset(6, 2)),
		want: []Row{cfaRow(0x2000, RegSP, 8, 0), cfaRow(0x2001, RegSP, 16, -16), kindRow(0x2040, KindNoCFI)},
	}, {
		name: "set_loc",
		fde:  cat(setLoc(0x2010), defCFAOffset(32), setLoc(0x2010), setLoc(0x2020), defCFAOffset(8)),
		want: []Row{cfaRow(0x2000, RegSP, 8, 0), cfaRow(0x2010, RegSP, 32, 0), cfaRow(0x2020, RegSP, 8, 0), kindRow(0x2040, KindNoCFI)},
	}, {
		name: "set_loc backwards",
		fde:  cat(setLoc(0x2010), defCFAOffset(32), setLoc(0x2008), defCFAOffset(8)),
		want: []Row{cfaRow(0x2000, RegSP, 8, 0), kindRow(0x2010, KindUnsupported), kindRow(0x2040, KindNoCFI)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := frameAsm{debug: true}
			a.fde(a.cie("", stdCIE...), 0x2000, 0x40, tt.fde...)
			table, err := buildSections(sources{arch: archX86, dbg: a.section()})
			require.NoError(t, err)
			require.Equal(t, tt.want, table.Rows)
		})
	}
}

func TestLookup(t *testing.T) {
	table := &Table{Rows: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1004, RegFP, 16, -16), kindRow(0x1010, KindNoCFI)}}
	for _, tt := range []struct {
		pc   uint64
		want Row
	}{
		{0, Row{}},
		{0xfff, Row{}},
		{0x1000, table.Rows[0]},
		{0x1003, table.Rows[0]},
		{0x1004, table.Rows[1]},
		{0x100f, table.Rows[1]},
		{0x1010, table.Rows[2]},
		{1 << 63, table.Rows[2]},
	} {
		require.Equal(t, tt.want, table.Lookup(tt.pc), "pc %#x", tt.pc)
	}
	require.Equal(t, Row{}, (&Table{}).Lookup(0x1000))
}
