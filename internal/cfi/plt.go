package cfi

import (
	"debug/elf"
	"encoding/binary"
)

// stub is linker-generated code without CFI, [start, end), and its rows
// (sorted, the first at start).
type stub struct {
	start, end uint64
	rows       []Row
}

// aarch64 instructions of the lazy PLT header (PLT0), 32 bytes.
const (
	insnBTIC      = 0xd503245f // bti c
	insnPushX16LR = 0xa9bf7bf0 // stp x16, x30, [sp, #-16]!
	plt0Size      = 32
)

// pltStubs returns the stubs of the named PLT sections of an aarch64 file,
// for which the linker writes no CFI.
func pltStubs(f *elf.File, names []string) []stub {
	var out []stub
	for _, name := range names {
		s := f.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 ||
			s.Size == 0 || s.Addr+s.Size < s.Addr {
			continue
		}
		head := make([]byte, 8)
		if n, err := readAt(s, head); err != nil || n < len(head) {
			head = nil
		}
		out = append(out, pltStub(s.Addr, s.Size, head))
	}
	return out
}

// pltStub returns the rows of a PLT at addr whose first bytes are head. An
// entry jumps through x16/x17 touching neither sp, x29 nor x30: CFA = sp,
// the return address in x30. Only the lazy resolver's header (PLT0, after
// an optional bti c) pushes x16 and x30: from its next instruction to the
// header's end, CFA = sp+16.
func pltStub(addr, size uint64, head []byte) stub {
	st := stub{start: addr, end: addr + size, rows: []Row{linkRow(addr, 0)}}
	if len(head) < 8 || size < plt0Size {
		return st
	}
	push := uint64(0)
	switch first, second := binary.LittleEndian.Uint32(head), binary.LittleEndian.Uint32(head[4:]); {
	case first == insnPushX16LR:
		push = 4
	case first == insnBTIC && second == insnPushX16LR:
		push = 8
	default:
		return st
	}
	st.rows = append(st.rows, linkRow(addr+push, 16), linkRow(addr+plt0Size, 0))
	return st
}

// linkRow is the row of code whose return address is in x30, CFA = sp+off.
func linkRow(pc uint64, off int32) Row {
	return Row{PC: pc, Kind: KindCFA, CFAReg: RegSP, CFAOffset: off}
}

// readAt reads the first bytes of s into buf.
func readAt(s *elf.Section, buf []byte) (n int, err error) {
	defer recoverELF(&err)
	return s.ReadAt(buf, 0)
}
