package cfi

import "debug/elf"

// arch is what the builder knows of a machine: the DWARF numbers of the
// registers rows are computed from, and where return addresses are.
type arch struct {
	sp, fp uint64 // DWARF numbers of the stack and frame pointers
	// raSlot is where the return address must be saved (x86-64: CFA-8, the
	// call pushed it there); 0: anywhere, or not at all when raLink.
	raSlot int32
	// raLink: a return address not saved is still in the link register,
	// DWARF register link (RAOffset 0), when that is the CIE's return
	// address column.
	raLink bool
	link   uint64
	// signedRA: DW_CFA_AARCH64_negate_ra_state (0x2d) and its _with_pc
	// form (0x2c) mark return addresses signed with pointer authentication;
	// the walker strips the signature, the rows do not change.
	signedRA bool
	// expression recognizes the CFA expressions of known code (nil: none).
	expression func(*ruleSet) (Row, bool)
	// stubs are the sections of linker stubs without CFI that get rows of
	// their own (pltStubs).
	stubs []string
}

// x86-64 DWARF register numbers (System V psABI).
const (
	dwarfRBP = 6
	dwarfRSP = 7
	dwarfRIP = 16
)

// x86RASlot is where a call leaves the return address on x86-64: just
// below the CFA. CFI saying otherwise is not followed.
const x86RASlot = -8

// aarch64 DWARF register numbers (AAPCS64 DWARF).
const (
	dwarfX29 = 29 // frame pointer
	dwarfX30 = 30 // link register
	dwarfSP  = 31
)

var (
	archX86 = &arch{sp: dwarfRSP, fp: dwarfRBP, raSlot: x86RASlot, expression: classifyExpression}
	archARM = &arch{sp: dwarfSP, fp: dwarfX29, raLink: true, link: dwarfX30, signedRA: true,
		stubs: []string{".plt", ".iplt"}}
)

// archOf returns the arch of machine, or nil.
func archOf(m elf.Machine) *arch {
	switch m {
	case elf.EM_X86_64:
		return archX86
	case elf.EM_AARCH64:
		return archARM
	}
	return nil
}
