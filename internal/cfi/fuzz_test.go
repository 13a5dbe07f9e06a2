package cfi

import (
	"debug/elf"
	"testing"
)

// FuzzParseEHFrame feeds raw .eh_frame (or, mode&1, .debug_frame) bytes at a
// section address to the table builder, walking the section or (mode&2)
// looking FDEs up at every fourth offset as a search table would, as
// x86-64's CFI or (mode&4) as aarch64's, with a PLT at the section address
// whose code is the same bytes: it must never panic nor run away, and the
// table must stay sorted and merged.
func FuzzParseEHFrame(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed, uint64(0x400), uint8(0))
		f.Add(seed, uint64(0x400), uint8(2))
	}
	for _, seed := range fuzzSeedsARM64() {
		f.Add(seed, uint64(0x400), uint8(4))
		f.Add(seed, uint64(0x400), uint8(6))
	}
	debug := frameAsm{debug: true}
	debug.fde(debug.cie("", stdCIE...), 0x2000, 0x40, cat(advance(1), defCFAOffset(16), offset(6, 2))...)
	f.Add(debug.buf, uint64(0), uint8(1))
	for _, path := range []string{"/usr/bin/xz", "/lib/x86_64-linux-gnu/libc.so.6"} {
		if data, addr, ok := realEHFrame(path, 2048); ok {
			f.Add(data, addr, uint8(0))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, mode uint8) {
		sec := &frameSection{data: data, addr: addr, debug: mode&1 != 0}
		src := sources{arch: archX86}
		if mode&4 != 0 {
			src.arch = archARM
			src.stubs = []stub{pltStub(addr, uint64(len(data)), data)}
		}
		var eh ehSource
		switch {
		case sec.debug:
			src.dbg = sec
		case mode&2 != 0:
			eh.sec = sec
			eh.fdeOffsets = []int{}
			for off := 0; off < len(data) && off < 256; off += 4 {
				eh.fdeOffsets = append(eh.fdeOffsets, off)
			}
		default:
			eh.sec = sec
		}
		src.eh = eh
		table, err := buildSections(src)
		if err != nil {
			return
		}
		for i := 1; i < len(table.Rows); i++ {
			prev, cur := table.Rows[i-1], table.Rows[i]
			if prev.PC >= cur.PC || sameRule(prev, cur) {
				t.Fatalf("rows %d, %d out of order or alike: %+v %+v", i-1, i, prev, cur)
			}
		}
		for _, r := range table.Rows {
			if got := table.Lookup(r.PC); got != r {
				t.Fatalf("Lookup(%#x) = %+v, want %+v", r.PC, got, r)
			}
		}
	})
}

// fuzzSeeds are CIE/FDE byte strings shaped like real ones: a gcc function
// with an early return, binutils' lazy PLT, glibc's __restore_rt.
func fuzzSeeds() [][]byte {
	fn := frameAsm{addr: 0x400}
	fn.fde(fn.cie("zR", stdCIE...), 0x1000, 0x40, cat(advance(1), defCFAOffset(16), offset(6, 2), advance(3),
		defCFARegister(6), advance(8), []byte{0x0a}, defCFA(7, 8), advance(1), []byte{0x0b})...)
	fn.fde(fn.cie("zPLR", stdCIE...), 0x1040, 0x10, []byte{0x2e, 0x10, 0x07, 16}...)

	plt := frameAsm{addr: 0x400}
	plt.fde(plt.cie("zR", stdCIE...), 0x1020, 0x30, cat(defCFAOffset(16), advance(6), defCFAOffset(24), advance(10), pltExpression(11))...)

	sig := frameAsm{addr: 0x400}
	sig.fde(sig.cie("zRS"), 0x104f, 0xa, cat(cfaExpression(cat(bregRSP(160), []byte{0x06})...),
		expression(6, bregRSP(120)...), expression(7, bregRSP(160)...), expression(16, bregRSP(168)...))...)
	return [][]byte{fn.buf, plt.buf, sig.buf, {}}
}

// fuzzSeedsARM64 are aarch64 CIE/FDE byte strings: a gcc function with a
// frame record and pac-ret, glibc's _start.
func fuzzSeedsARM64() [][]byte {
	fn := frameAsm{addr: 0x400, codeAlign: 4, ra: dwarfX30}
	fn.fde(fn.cie("zR", armCIE...), 0x1000, 0x40, cat([]byte{0x2d}, advance(1), defCFAOffset(32), offset(dwarfX29, 4),
		offset(dwarfX30, 3), advance(1), defCFARegister(dwarfX29), advance(4), []byte{0x0a}, defCFA(dwarfSP, 0),
		[]byte{0xc0 | dwarfX30, 0xc0 | dwarfX29, 0x2d}, advance(1), []byte{0x0b})...)
	start := frameAsm{addr: 0x400, codeAlign: 4, ra: dwarfX30}
	start.fde(start.cie("zR", armCIE...), 0x1040, 0x34, 0x07, dwarfX30)
	return [][]byte{fn.buf, start.buf}
}

// realEHFrame returns the first n bytes of a file's .eh_frame.
func realEHFrame(path string, n int) ([]byte, uint64, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, 0, false
	}
	defer f.Close()
	s := f.Section(".eh_frame")
	if s == nil {
		return nil, 0, false
	}
	data, err := s.Data()
	if err != nil {
		return nil, 0, false
	}
	return data[:min(n, len(data))], s.Addr, true
}
