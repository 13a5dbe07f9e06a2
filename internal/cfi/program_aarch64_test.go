package cfi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// The usual aarch64 CIE instructions: CFA = sp+0 (x30 has no rule: the
// return address is in the link register).
var armCIE = defCFA(dwarfSP, 0)

// armRow is an expected aarch64 KindCFA row.
func armRow(pc uint64, reg Reg, off, fp, ra int32) Row {
	return Row{PC: pc, Kind: KindCFA, CFAReg: reg, CFAOffset: off, FPOffset: fp, RAOffset: ra}
}

// TestProgramARM64 evaluates aarch64 CFA programs (code alignment 4: an
// advance(1) is one instruction) of one FDE covering [0x1000, 0x1100).
func TestProgramARM64(t *testing.T) {
	const end = 0x1100
	negateRAState := []byte{0x2d}
	// stp x29, x30, [sp, #-32]!
	prologue := cat(advance(1), defCFAOffset(32), offset(dwarfX29, 4), offset(dwarfX30, 3))
	tests := []struct {
		name     string
		arch     *arch  // archARM when nil
		ra       byte   // the CIE's return address column: 30 when 0
		cie      []byte // armCIE when nil
		fde      []byte
		want     []Row
		badProgs int
	}{{
		name: "leaf: the return address stays in x30",
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "stp x29, x30 prologue, ldp epilogue",
		fde: cat(prologue, advance(6), []byte{0xc0 | dwarfX30, 0xc0 | dwarfX29}, defCFAOffset(0), // ldp x29, x30, [sp], #32
			advance(1), defCFAOffset(32), offset(dwarfX29, 4), offset(dwarfX30, 3)), // a second exit path
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 32, -32, -24),
			armRow(0x101c, RegSP, 0, 0, 0), armRow(0x1020, RegSP, 32, -32, -24), kindRow(end, KindNoCFI)},
	}, {
		name: "CFA switched to x29 after mov x29, sp, back to sp in the epilogue",
		fde: cat(prologue, advance(1), defCFARegister(dwarfX29), advance(4), defCFA(dwarfSP, 32),
			advance(1), []byte{0xc0 | dwarfX30, 0xc0 | dwarfX29}, defCFAOffset(0)),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 32, -32, -24), armRow(0x1008, RegFP, 32, -32, -24),
			armRow(0x1018, RegSP, 32, -32, -24), armRow(0x101c, RegSP, 0, 0, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "pac-ret: negate_ra_state changes no row, remembered or not",
		fde: cat(negateRAState, prologue, advance(4), []byte{0x0a}, []byte{0xc0 | dwarfX30, 0xc0 | dwarfX29},
			defCFAOffset(0), negateRAState, advance(1), []byte{0x0b}),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 32, -32, -24),
			armRow(0x1014, RegSP, 0, 0, 0), armRow(0x1018, RegSP, 32, -32, -24), kindRow(end, KindNoCFI)},
	}, {
		name: "negate_ra_state_with_pc, in the CIE too",
		cie:  cat(armCIE, negateRAState),
		fde:  cat([]byte{0x2c}, prologue),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 32, -32, -24), kindRow(end, KindNoCFI)},
	}, {
		name: "x86-64 does not know negate_ra_state",
		arch: archX86, ra: 16, cie: stdCIE,
		fde:      cat(advance(1), negateRAState),
		want:     []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1001, KindUnsupported), kindRow(end, KindNoCFI)},
		badProgs: 1,
	}, {
		name: "undefined x30 (_start): outermost frame",
		fde:  []byte{0x07, dwarfX30},
		want: []Row{kindRow(0x1000, KindStop), kindRow(end, KindNoCFI)},
	}, {
		name: "same_value x30 after a save: in the link register again",
		fde:  cat(prologue, advance(2), []byte{0x08, dwarfX30}),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 32, -32, -24), armRow(0x100c, RegSP, 32, -32, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "x30 saved in x15",
		fde:  cat(advance(5), []byte{0x09, dwarfX30, 15}),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), kindRow(0x1014, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "x29 saved in a register",
		fde:  []byte{0x09, dwarfX29, 19},
		want: []Row{kindRow(0x1000, KindUnsupported), kindRow(end, KindNoCFI)},
	}, {
		name: "CFA on x0 (__longjmp), then on a CFA expression",
		fde:  cat(advance(1), defCFA(0, 0), advance(1), cfaExpression(0x8f, 0), advance(1), defCFA(dwarfSP, 16)),
		want: []Row{armRow(0x1000, RegSP, 0, 0, 0), kindRow(0x1004, KindUnsupported), armRow(0x100c, RegSP, 16, 0, 0), kindRow(end, KindNoCFI)},
	}, {
		name: "a return address column other than x30, unsaved, is in no register the walker reads",
		ra:   16,
		fde:  cat(advance(1), offset(16, 1)),
		want: []Row{kindRow(0x1000, KindUnsupported), armRow(0x1004, RegSP, 0, 0, -8), kindRow(end, KindNoCFI)},
	}, {
		name: "large frames, x29 and x30 saved far from the CFA",
		fde: cat(defCFAOffset(1<<20), []byte{0x05, dwarfX29}, uleb(1<<17), []byte{0x05, dwarfX30}, uleb(1<<17-1),
			advance(1), defCFAOffset(8)),
		want: []Row{armRow(0x1000, RegSP, 1<<20, -1<<20, -1<<20+8), armRow(0x1004, RegSP, 8, -1<<20, -1<<20+8), kindRow(end, KindNoCFI)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ra, cieInstr := tt.arch, tt.ra, tt.cie
			if a == nil {
				a = archARM
			}
			if ra == 0 {
				ra = dwarfX30
			}
			if cieInstr == nil {
				cieInstr = armCIE
			}
			codeAlign := byte(4)
			if a == archX86 {
				codeAlign = 1
			}
			asm := frameAsm{addr: 0x400, codeAlign: codeAlign, ra: ra}
			asm.fde(asm.cie("zR", cieInstr...), 0x1000, end-0x1000, tt.fde...)
			table, err := buildSections(sources{arch: a, eh: ehSource{sec: asm.section()}})
			require.NoError(t, err)
			require.Equal(t, tt.want, table.Rows)
			require.Equal(t, tt.badProgs, table.Stats.BadPrograms)
			checkInvariants(t, table)
		})
	}
}

func TestPLTStub(t *testing.T) {
	insns := func(words ...uint32) []byte {
		var b []byte
		for _, w := range words {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
		return b
	}
	const adrp, nop = 0x90000bd0, 0xd503201f
	tests := []struct {
		name string
		size uint64
		head []byte
		want []Row
	}{{
		name: "lazy PLT: the header's push",
		size: 0x150, head: insns(insnPushX16LR, adrp),
		want: []Row{linkRow(0x2000, 0), linkRow(0x2004, 16), linkRow(0x2020, 0)},
	}, {
		name: "BTI PLT header",
		size: 0x150, head: insns(insnBTIC, insnPushX16LR),
		want: []Row{linkRow(0x2000, 0), linkRow(0x2008, 16), linkRow(0x2020, 0)},
	}, {
		name: "entries only (.iplt)",
		size: 0x40, head: insns(adrp, 0xf9400211),
		want: []Row{linkRow(0x2000, 0)},
	}, {
		name: "header alone",
		size: 0x20, head: insns(insnPushX16LR, adrp),
		want: []Row{linkRow(0x2000, 0), linkRow(0x2004, 16), linkRow(0x2020, 0)},
	}, {
		name: "too short for a header",
		size: 0x10, head: insns(insnPushX16LR, nop),
		want: []Row{linkRow(0x2000, 0)},
	}, {
		name: "unreadable",
		size: 0x150,
		want: []Row{linkRow(0x2000, 0)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pltStub(0x2000, tt.size, tt.head)
			require.Equal(t, stub{start: 0x2000, end: 0x2000 + tt.size, rows: tt.want}, st)
		})
	}
}

// TestStubLayout: PLT rows fill what no FDE covers, within the executable
// segments.
func TestStubLayout(t *testing.T) {
	plt := func(start, size uint64) stub { return pltStub(start, size, nil) }
	tests := []struct {
		name  string
		fdes  []uint64 // starts of 16-byte FDEs with a push: {0x1000} when nil
		stubs []stub
		exec  []addrRange
		want  []Row
	}{{
		name:  "a PLT before the text",
		stubs: []stub{plt(0x800, 0x100), plt(0xa00, 0x10)},
		want: []Row{linkRow(0x800, 0), kindRow(0x900, KindNoCFI), linkRow(0xa00, 0), kindRow(0xa10, KindNoCFI),
			armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 16, -16, -8), kindRow(0x1010, KindNoCFI)},
	}, {
		name:  "FDEs win over stubs, a stub fills the gap",
		fdes:  []uint64{0x1000, 0x1020},
		stubs: []stub{{start: 0xff0, end: 0x1030, rows: []Row{linkRow(0xff0, 0), linkRow(0x1008, 16)}}},
		want: []Row{linkRow(0xff0, 0), armRow(0x1004, RegSP, 16, -16, -8), linkRow(0x1010, 16),
			armRow(0x1020, RegSP, 0, 0, 0), armRow(0x1024, RegSP, 16, -16, -8), kindRow(0x1030, KindNoCFI)},
	}, {
		name:  "stubs outside the executable segments, or empty, are left out",
		stubs: []stub{plt(0x10, 0x10), plt(0x800, 0)},
		exec:  []addrRange{{0x800, 0x2000}},
		want:  []Row{armRow(0x1000, RegSP, 0, 0, 0), armRow(0x1004, RegSP, 16, -16, -8), kindRow(0x1010, KindNoCFI)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asm := frameAsm{addr: 0x400, codeAlign: 4, ra: dwarfX30}
			c := asm.cie("zR", armCIE...)
			fdes := tt.fdes
			if fdes == nil {
				fdes = []uint64{0x1000}
			}
			for _, start := range fdes {
				asm.fde(c, start, 0x10, cat(advance(1), defCFAOffset(16), offset(dwarfX29, 2), offset(dwarfX30, 1))...)
			}
			table, err := buildSections(sources{arch: archARM, eh: ehSource{sec: asm.section()}, exec: tt.exec, stubs: tt.stubs})
			require.NoError(t, err)
			require.Equal(t, tt.want, table.Rows)
			checkInvariants(t, table)
		})
	}
}
