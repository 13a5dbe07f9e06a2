package cfi

import "encoding/binary"

// frameAsm assembles .eh_frame (or .debug_frame) bytes for tests: CIEs with
// augmentation "zR" and pcrel|sdata4 FDE addresses (debug: absolute 8-byte
// addresses, no augmentation), data alignment -8.
type frameAsm struct {
	buf   []byte
	addr  uint64 // section address
	debug bool
	// The CIEs' code alignment and return address column (0: 1 and 16, as
	// on x86-64; aarch64 has 4 and 30).
	codeAlign, ra byte
}

// The usual x86-64 CIE instructions: CFA = rsp+8, return address at CFA-8.
var stdCIE = []byte{0x0c, 7, 8, 0x90, 1}

// cie appends a CIE and returns its offset; aug is "zR", "zRS", "zPLR"...
func (a *frameAsm) cie(aug string, instr ...byte) int {
	off := len(a.buf)
	body := []byte{}
	if a.debug {
		body = append(body, 0xff, 0xff, 0xff, 0xff, 1, 0) // id, version, ""
	} else {
		body = append(body, 0, 0, 0, 0, 1)
		body = append(body, aug...)
		body = append(body, 0)
	}
	codeAlign, ra := max(a.codeAlign, 1), a.ra
	if ra == 0 {
		ra = 16
	}
	body = append(body, codeAlign, 0x78, ra) // data align -8
	if !a.debug {
		var augData []byte
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				augData = append(augData, 0x1b)
			case 'L':
				augData = append(augData, 0x1b)
			case 'P': // udata4 personality
				augData = append(augData, 0x03, 1, 2, 3, 4)
			}
		}
		body = append(body, byte(len(augData)))
		body = append(body, augData...)
	}
	a.entry(append(body, instr...))
	return off
}

// fde appends an FDE of the CIE at cieOff for [start, start+size).
func (a *frameAsm) fde(cieOff int, start, size uint64, instr ...byte) int {
	off := len(a.buf)
	var body []byte
	if a.debug {
		body = binary.LittleEndian.AppendUint32(body, uint32(cieOff))
		body = binary.LittleEndian.AppendUint64(body, start)
		body = binary.LittleEndian.AppendUint64(body, size)
	} else {
		body = binary.LittleEndian.AppendUint32(body, uint32(off+4-cieOff))
		field := a.addr + uint64(off) + 8
		body = binary.LittleEndian.AppendUint32(body, uint32(start-field))
		body = binary.LittleEndian.AppendUint32(body, uint32(size))
		body = append(body, 0) // augmentation data length
	}
	a.entry(append(body, instr...))
	return off
}

func (a *frameAsm) entry(body []byte) {
	a.buf = binary.LittleEndian.AppendUint32(a.buf, uint32(len(body)))
	a.buf = append(a.buf, body...)
}

func (a *frameAsm) section() *frameSection {
	return &frameSection{data: a.buf, addr: a.addr, debug: a.debug}
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// CFA instructions, for readable test programs.
func advance(n uint8) []byte        { return []byte{0x40 | n} }
func defCFA(reg, off uint64) []byte { return cat([]byte{0x0c}, uleb(reg), uleb(off)) }
func defCFAOffset(off uint64) []byte {
	return cat([]byte{0x0e}, uleb(off))
}
func defCFARegister(reg uint64) []byte         { return cat([]byte{0x0d}, uleb(reg)) }
func offset(reg uint8, factored uint64) []byte { return cat([]byte{0x80 | reg}, uleb(factored)) }
func cfaExpression(expr ...byte) []byte        { return cat([]byte{0x0f}, uleb(uint64(len(expr))), expr) }
func expression(reg uint64, expr ...byte) []byte {
	return cat([]byte{0x10}, uleb(reg), uleb(uint64(len(expr))), expr)
}
func bregRSP(off int64) []byte { return cat([]byte{0x77}, sleb(off)) }

// pltExpression is the CFA expression of binutils' lazy PLT entries.
func pltExpression(edge uint8) []byte {
	return cfaExpression(cat(bregRSP(8), []byte{0x80, 0, 0x3f, 0x1a, 0x30 + edge, 0x2a, 0x33, 0x24, 0x22})...)
}
