package cfi

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// cfaRule says how to compute the CFA: register + offset, or an expression.
type cfaRule struct {
	reg  uint64
	off  int64
	expr []byte // non-nil: the CFA is the value of this DWARF expression
}

type ruleKind uint8

const (
	ruleSame          ruleKind = iota // unchanged: not mentioned, or same_value
	ruleUndefined                     // not recoverable
	ruleOffset                        // saved at CFA+off
	ruleValOffset                     // the value is CFA+off
	ruleRegister                      // the value is in register off
	ruleExpression                    // saved at the address expr computes
	ruleValExpression                 // the value is what expr computes
)

type regRule struct {
	kind ruleKind
	off  int64
	expr []byte
}

// ruleSet is one row of the CFA table, reduced to what the walker restores:
// the CFA, the frame pointer and the return address.
type ruleSet struct {
	cfa    cfaRule
	fp, ra regRule
}

// maxStateDepth bounds DW_CFA_remember_state nesting.
const maxStateDepth = 64

// ErrTooManyRows is the error of a file with more rows than a table may
// hold (maxRows).
var ErrTooManyRows = errors.New("too many rows")

// rowChunk is how many rows a chunk of a rowSink holds (an FDE with more
// gets a chunk of its own).
const rowChunk = 1 << 14

// rowSink collects the rows of all FDEs, up to max, in chunks: a large
// file's rows are never copied to a doubled array, and each FDE's rows
// are contiguous in one chunk.
type rowSink struct {
	chunks [][]Row
	fde    int // index in the last chunk of the current FDE's first row
	total  int
	max    int
}

// startFDE starts the rows of the next FDE.
func (s *rowSink) startFDE() {
	if len(s.chunks) == 0 {
		s.chunks = append(s.chunks, make([]Row, 0, rowChunk))
	}
	s.fde = len(s.chunks[len(s.chunks)-1])
}

// fdeRows says where the current FDE's rows are: chunk and [lo, hi).
func (s *rowSink) fdeRows() (chunk, lo, hi int32) {
	last := len(s.chunks) - 1
	return int32(last), int32(s.fde), int32(len(s.chunks[last]))
}

// rows returns the rows of sp.
func (s *rowSink) rows(sp span) []Row { return s.chunks[sp.chunk][sp.lo:sp.hi] }

// add appends row to the current FDE's rows, unless it repeats the rule
// of the FDE's last row.
func (s *rowSink) add(row Row) error {
	last := len(s.chunks) - 1
	c := s.chunks[last]
	if n := len(c); n > s.fde && sameRule(c[n-1], row) {
		return nil
	}
	if s.total >= s.max {
		return ErrTooManyRows
	}
	if len(c) == cap(c) { // the FDE's rows move to a new chunk
		fde := c[s.fde:]
		next := make([]Row, len(fde), max(rowChunk, 2*len(fde)))
		copy(next, fde)
		s.chunks[last] = c[:s.fde:s.fde]
		s.chunks = append(s.chunks, next)
		s.fde, last, c = 0, last+1, next
	}
	s.chunks[last] = append(c, row)
	s.total++
	return nil
}

// program evaluates the CFA instructions of a CIE (inCIE) or of an FDE,
// whose rows for [loc, end) it adds to out.
type program struct {
	a        *arch
	c        *cie
	inCIE    bool
	rules    ruleSet
	stack    []ruleSet
	loc, end uint64
	out      *rowSink // its FDE started (startFDE)
}

// run executes the instructions of r (secAddr is the address of r.buf[0])
// and adds the last row. On an instruction it cannot follow, the rest of the
// range gets one KindUnsupported row and the error is returned.
func (p *program) run(r reader, secAddr uint64) error {
	done, err := false, error(nil)
	for !done && err == nil && r.left() > 0 {
		done, err = p.step(&r, secAddr)
		if r.bad && err == nil {
			err = errTruncated
		}
	}
	if p.inCIE || done {
		return err
	}
	if err != nil {
		if errors.Is(err, ErrTooManyRows) {
			return err
		}
		if e := p.add(Row{PC: p.loc, Kind: KindUnsupported}); e != nil {
			return e
		}
		return err
	}
	return p.emit()
}

// step executes one instruction; done says the location reached the end.
func (p *program) step(r *reader, secAddr uint64) (done bool, err error) {
	c := p.c
	op := r.u8()
	switch op >> 6 {
	case 1: // DW_CFA_advance_loc
		return p.advance(uint64(op & 0x3f))
	case 2: // DW_CFA_offset
		p.setRule(uint64(op&0x3f), regRule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
		return false, nil
	case 3: // DW_CFA_restore
		p.restore(uint64(op & 0x3f))
		return false, nil
	}
	switch op {
	case 0x00: // nop
	case 0x01: // set_loc
		fieldAddr := secAddr + uint64(r.off)
		loc, err := r.pointer(c.fdeEnc, fieldAddr, 0, c.addrSize)
		if err != nil {
			return false, err
		}
		if loc < p.loc {
			return false, fmt.Errorf("set_loc %#x before %#x", loc, p.loc)
		}
		return p.advanceTo(loc)
	case 0x02:
		return p.advance(uint64(r.u8()))
	case 0x03:
		return p.advance(uint64(r.u16()))
	case 0x04:
		return p.advance(uint64(r.u32()))
	case 0x05: // offset_extended
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
	case 0x06: // restore_extended
		p.restore(r.uleb())
	case 0x07: // undefined
		p.setRule(r.uleb(), regRule{kind: ruleUndefined})
	case 0x08: // same_value
		p.setRule(r.uleb(), regRule{kind: ruleSame})
	case 0x09: // register
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleRegister, off: int64(r.uleb())})
	case 0x0a: // remember_state
		if len(p.stack) >= maxStateDepth {
			return false, errors.New("remember_state nested too deep")
		}
		p.stack = append(p.stack, p.rules)
	case 0x0b: // restore_state
		n := len(p.stack)
		if n == 0 {
			return false, errors.New("restore_state without remember_state")
		}
		p.rules, p.stack = p.stack[n-1], p.stack[:n-1]
	case 0x0c: // def_cfa
		reg := r.uleb()
		p.rules.cfa = cfaRule{reg: reg, off: int64(r.uleb())}
	case 0x0d: // def_cfa_register
		p.rules.cfa = cfaRule{reg: r.uleb(), off: p.rules.cfa.off}
	case 0x0e: // def_cfa_offset (an expression CFA stays one, as in libgcc)
		p.rules.cfa.off = int64(r.uleb())
	case 0x0f: // def_cfa_expression
		p.rules.cfa = cfaRule{expr: nonNil(r.block())}
	case 0x10: // expression
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleExpression, expr: r.block()})
	case 0x11: // offset_extended_sf
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleOffset, off: r.sleb() * c.dataAlign})
	case 0x12: // def_cfa_sf
		reg := r.uleb()
		p.rules.cfa = cfaRule{reg: reg, off: r.sleb() * c.dataAlign}
	case 0x13: // def_cfa_offset_sf
		p.rules.cfa.off = r.sleb() * c.dataAlign
	case 0x14: // val_offset
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleValOffset, off: int64(r.uleb()) * c.dataAlign})
	case 0x15: // val_offset_sf
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleValOffset, off: r.sleb() * c.dataAlign})
	case 0x16: // val_expression
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleValExpression, expr: r.block()})
	case 0x2c, 0x2d: // AARCH64_negate_ra_state(_with_pc): see arch.signedRA
		if !p.a.signedRA {
			return false, fmt.Errorf("unknown CFA instruction %#x", op)
		}
	case 0x2e: // GNU_args_size: only matters to exception handling
		r.uleb()
	case 0x2f: // GNU_negative_offset_extended
		reg := r.uleb()
		p.setRule(reg, regRule{kind: ruleOffset, off: -int64(r.uleb()) * c.dataAlign})
	default:
		return false, fmt.Errorf("unknown CFA instruction %#x", op)
	}
	return false, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// advance moves the location by delta code alignment units.
func (p *program) advance(delta uint64) (bool, error) {
	hi, step := bits.Mul64(delta, p.c.codeAlign)
	next, carry := bits.Add64(p.loc, step, 0)
	if hi != 0 || carry != 0 {
		next = math.MaxUint64
	}
	return p.advanceTo(next)
}

// advanceTo ends the current row at next; done once next reaches the end.
func (p *program) advanceTo(next uint64) (bool, error) {
	if p.inCIE {
		return false, errors.New("location advanced in a CIE")
	}
	if next == p.loc {
		return false, nil
	}
	if err := p.emit(); err != nil {
		return false, err
	}
	if next >= p.end {
		return true, nil
	}
	p.loc = next
	return false, nil
}

// rule returns the tracked rule of DWARF register reg, or nil.
func (p *program) rule(rs *ruleSet, reg uint64) *regRule {
	switch reg {
	case p.c.raReg:
		return &rs.ra
	case p.a.fp:
		return &rs.fp
	}
	return nil
}

func (p *program) setRule(reg uint64, rule regRule) {
	if dst := p.rule(&p.rules, reg); dst != nil {
		*dst = rule
	}
}

func (p *program) restore(reg uint64) {
	if dst := p.rule(&p.rules, reg); dst != nil {
		*dst = *p.rule(&p.c.initial, reg)
	}
}

// emit adds the row of the current rules at the current location.
func (p *program) emit() error {
	row := p.a.classify(&p.rules, p.c.raReg)
	row.PC = p.loc
	return p.add(row)
}

func (p *program) add(row Row) error { return p.out.add(row) }

// classify turns rules into a Row (without PC); raReg is the CIE's return
// address column.
func (a *arch) classify(rs *ruleSet, raReg uint64) Row {
	unsupported := Row{Kind: KindUnsupported}
	if rs.ra.kind == ruleUndefined {
		return Row{Kind: KindStop}
	}
	if rs.cfa.expr != nil {
		if a.expression != nil {
			if row, ok := a.expression(rs); ok {
				return row
			}
		}
		return unsupported
	}
	var reg Reg
	switch rs.cfa.reg {
	case a.sp:
		reg = RegSP
	case a.fp:
		reg = RegFP
	default:
		return unsupported
	}
	cfaOff, ok1 := int32Of(rs.cfa.off)
	raOff, ok2 := savedAt(rs.ra)
	fpOff, ok3 := savedAt(rs.fp)
	switch {
	case !ok1 || !ok2 || !ok3,
		a.raSlot != 0 && raOff != a.raSlot,
		raOff == 0 && (!a.raLink || raReg != a.link): // the return address is in no register the walker reads
		return unsupported
	}
	return Row{Kind: KindCFA, CFAReg: reg, CFAOffset: cfaOff, FPOffset: fpOff, RAOffset: raOff}
}

// savedAt returns where a register is saved relative to the CFA: 0 when it
// is unchanged; !ok when neither.
func savedAt(rule regRule) (int32, bool) {
	switch rule.kind {
	case ruleSame:
		return 0, true
	case ruleOffset:
		off, ok := int32Of(rule.off)
		return off, ok && off != 0
	}
	return 0, false
}

func int32Of(v int64) (int32, bool) {
	return int32(v), v >= math.MinInt32 && v <= math.MaxInt32
}

// DWARF expression operations the recognized expressions use.
const (
	opDeref = 0x06
	opAnd   = 0x1a
	opPlus  = 0x22
	opShl   = 0x24
	opGe    = 0x2a
	opLit0  = 0x30
	opBreg0 = 0x70
)

// classifyExpression recognizes the CFA expressions of linker-generated PLT
// entries and of signal trampolines.
func classifyExpression(rs *ruleSet) (Row, bool) {
	// PLT: rsp+K + (((rip & 15) >= N) << 3)
	if k, rest, ok := breg(rs.cfa.expr, dwarfRSP); ok {
		if rip, tail, ok := breg(rest, dwarfRIP); ok && rip == 0 && len(tail) == 7 &&
			tail[0] == opLit0+15 && tail[1] == opAnd && tail[2] >= opLit0 && tail[2] <= opLit0+15 &&
			tail[3] == opGe && tail[4] == opLit0+3 && tail[5] == opShl && tail[6] == opPlus {
			cfaOff, ok1 := int32Of(k)
			raOff, ok2 := savedAt(rs.ra)
			if ok1 && ok2 && raOff == x86RASlot && rs.fp.kind == ruleSame {
				return Row{Kind: KindPLT, CFAReg: RegSP, CFAOffset: cfaOff, RAOffset: raOff, PLTEdge: tail[2] - opLit0}, true
			}
			return Row{}, false
		}
		// Signal frame: CFA = *(rsp+S), rip and rbp saved at rsp+R, rsp+F.
		if len(rest) == 1 && rest[0] == opDeref && rs.ra.kind == ruleExpression && rs.fp.kind == ruleExpression {
			ra, raTail, ok1 := breg(rs.ra.expr, dwarfRSP)
			fp, fpTail, ok2 := breg(rs.fp.expr, dwarfRSP)
			cfaOff, ok3 := int32Of(k)
			raOff, ok4 := int32Of(ra)
			fpOff, ok5 := int32Of(fp)
			if ok1 && ok2 && ok3 && ok4 && ok5 && len(raTail) == 0 && len(fpTail) == 0 {
				return Row{Kind: KindSignal, CFAReg: RegSP, CFAOffset: cfaOff, RAOffset: raOff, FPOffset: fpOff}, true
			}
		}
	}
	return Row{}, false
}

// breg decodes a leading DW_OP_breg<reg> and returns its offset and the
// rest of the expression.
func breg(expr []byte, reg byte) (int64, []byte, bool) {
	if len(expr) < 2 || expr[0] != opBreg0+reg {
		return 0, nil, false
	}
	r := reader{buf: expr, off: 1}
	off := r.sleb()
	if r.bad {
		return 0, nil, false
	}
	return off, expr[r.off:], true
}
