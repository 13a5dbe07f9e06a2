// Package gosites finds where a duration probe attaches to a compiled Go
// function: the first instruction after its prologue's stack check (an
// entry probe on the function's first instruction fires twice for a call
// whose stack grows: runtime.morestack copies the stack and starts the
// function again) and each of its return instructions (a uretprobe would
// write a return address into a stack Go moves). It decodes the function's
// machine code with the Go team's decoders (golang.org/x/arch), amd64 and
// arm64.
package gosites

import (
	"debug/elf"
	"errors"
	"fmt"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// Sites are where a probe of one function attaches, as virtual addresses.
type Sites struct {
	// Entry is the first instruction after the prologue's stack check,
	// the function's entry when it has none (a nosplit function).
	Entry uint64
	// Returns are the function's return instructions, in address order.
	Returns []uint64
}

// ErrNoReturn is returned for a function without a return instruction
// (it ends in a tail call, or only panics or exits): an exit probe has
// nowhere to go.
var ErrNoReturn = errors.New("no return instruction")

// ErrUndecodable is wrapped by the error for code the decoder cannot read
// whole.
var ErrUndecodable = errors.New("machine code not decodable")

// ErrMachine is returned for a machine other than x86-64 and arm64.
var ErrMachine = errors.New("machine not supported")

// morestackReach bounds the instructions from a stack check's target to
// the jump back to the function's entry: the spills of every register
// argument (9 integer and 15 floating-point), the call and the reloads.
const morestackReach = 64

// Find decodes code, the whole of one Go function at addr (from its entry
// to the next function's, padding included), for machine.
func Find(machine elf.Machine, addr uint64, code []byte) (Sites, error) {
	insts, err := decode(machine, addr, code, false)
	if err != nil {
		return Sites{}, err
	}
	s := Sites{Entry: addr}
	for _, in := range insts {
		if in.kind == kindReturn {
			s.Returns = append(s.Returns, in.addr)
		}
	}
	if len(s.Returns) == 0 {
		return Sites{}, ErrNoReturn
	}
	if after, ok := afterStackCheck(insts, addr); ok {
		s.Entry = after
	}
	return s, nil
}

// FindEntry returns the entry site of the Go function at addr (code as
// for Find) for an entry probe alone: its returns are not needed, so on
// arm64, whose instructions are all 4 bytes, a word the decoder does not
// know (an LSE atomic such as CASAL, which the runtime's code has) is taken
// as an instruction that neither branches nor returns, not refused.
func FindEntry(machine elf.Machine, addr uint64, code []byte) (uint64, error) {
	insts, err := decode(machine, addr, code, true)
	if err != nil {
		return 0, err
	}
	if after, ok := afterStackCheck(insts, addr); ok {
		return after, nil
	}
	return addr, nil
}

// decode decodes code for machine; lenient: arm64 words not known are
// other instructions.
func decode(machine elf.Machine, addr uint64, code []byte, lenient bool) ([]inst, error) {
	switch machine {
	case elf.EM_X86_64:
		return decodeAMD64(addr, code)
	case elf.EM_AARCH64:
		return decodeARM64(addr, code, lenient)
	}
	return nil, fmt.Errorf("%w: %v", ErrMachine, machine)
}

type kind uint8

const (
	kindOther        kind = iota
	kindReturn            // returns from the function
	kindCall              // a direct or indirect call
	kindJump              // an unconditional direct jump to target
	kindCondJump          // a conditional direct jump to target
	kindIndirectJump      // a jump through a register or memory
	kindData              // a word of an arm64 constant pool
)

// inst is what the search needs of one decoded instruction.
type inst struct {
	addr   uint64
	next   uint64 // the address after it
	kind   kind
	target uint64 // of a direct jump
}

// afterStackCheck returns the address after the last conditional jump to
// the function's morestack block: the block that calls runtime.morestack
// and jumps back to entry, which only the prologue's checks branch to (a
// frame larger than a page has two checks, each branching there).
func afterStackCheck(insts []inst, entry uint64) (uint64, bool) {
	index := make(map[uint64]int, len(insts))
	for i, in := range insts {
		index[in.addr] = i
	}
	var after uint64
	found := false
	for _, in := range insts {
		if in.kind != kindCondJump {
			continue
		}
		start, ok := index[in.target]
		if !ok || !isMorestackBlock(insts[start:], entry) {
			continue
		}
		if in.next > after {
			after, found = in.next, true
		}
	}
	return after, found
}

// isMorestackBlock reports whether the instructions from the start of
// block reach, within morestackReach and without another branch, a call
// and then a jump back to entry.
func isMorestackBlock(block []inst, entry uint64) bool {
	called := false
	for _, in := range block[:min(len(block), morestackReach)] {
		switch in.kind {
		case kindCall:
			if called {
				return false
			}
			called = true
		case kindJump:
			return called && in.target == entry
		case kindOther:
		default:
			return false
		}
	}
	return false
}

// decodeAMD64 decodes x86-64 code linearly: Go puts no data in its text
// (jump tables are in rodata) and pads functions with INT3.
func decodeAMD64(addr uint64, code []byte) ([]inst, error) {
	var out []inst
	for off := 0; off < len(code); {
		d, err := x86asm.Decode(code[off:], 64)
		if err == nil && d.Op == 0 { // a prefix alone: cut short, or unknown
			err = errors.New("unknown instruction")
		}
		if err != nil || d.Len == 0 {
			return nil, fmt.Errorf("%w: at %#x (+%#x): %v", ErrUndecodable, addr+uint64(off), off, err)
		}
		in := inst{addr: addr + uint64(off), next: addr + uint64(off+d.Len)}
		rel, direct := d.Args[0].(x86asm.Rel)
		switch {
		case d.Op == x86asm.RET:
			in.kind = kindReturn
		case d.Op == x86asm.CALL:
			in.kind = kindCall
		case d.Op == x86asm.JMP && direct:
			in.kind, in.target = kindJump, uint64(int64(in.next)+int64(rel))
		case d.Op == x86asm.JMP:
			in.kind = kindIndirectJump
		case isConditionalAMD64(d.Op) && direct:
			in.kind, in.target = kindCondJump, uint64(int64(in.next)+int64(rel))
		}
		out = append(out, in)
		off += d.Len
	}
	return out, nil
}

func isConditionalAMD64(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP,
		x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS:
		return true
	}
	return false
}

// decodeARM64 decodes arm64 code linearly. Go pads functions with zero
// words, which decode as nothing: they end the code when nothing but zero
// words follows. Another word the decoder does not know (a literal of
// the assembler's constant pool, placed after an unconditional branch) is
// stepped over when an unconditional branch or return precedes it;
// elsewhere it is an error.
func decodeARM64(addr uint64, code []byte, lenient bool) ([]inst, error) {
	var out []inst
	for off := 0; off+4 <= len(code); off += 4 {
		in := inst{addr: addr + uint64(off), next: addr + uint64(off) + 4}
		d, err := arm64asm.Decode(code[off:])
		if err != nil {
			if allZero(code[off:]) {
				break
			}
			if n := len(out); n > 0 && endsFlow(out[n-1].kind) {
				in.kind = kindData
				out = append(out, in)
				continue
			}
			if lenient {
				out = append(out, in)
				continue
			}
			return nil, fmt.Errorf("%w: at %#x (+%#x): %v", ErrUndecodable, in.addr, off, err)
		}
		switch d.Op {
		case arm64asm.RET:
			in.kind = kindReturn
		case arm64asm.BL, arm64asm.BLR:
			in.kind = kindCall
		case arm64asm.BR:
			in.kind = kindIndirectJump
		case arm64asm.B, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ:
			for _, a := range d.Args {
				if rel, ok := a.(arm64asm.PCRel); ok {
					in.target = uint64(int64(in.addr) + int64(rel))
				}
			}
			in.kind = kindCondJump
			if d.Op == arm64asm.B && d.Args[0] != nil {
				if _, cond := d.Args[0].(arm64asm.Cond); !cond {
					in.kind = kindJump
				}
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// endsFlow reports whether execution never falls through an instruction of
// kind k into the next word.
func endsFlow(k kind) bool {
	return k == kindJump || k == kindReturn || k == kindIndirectJump || k == kindData
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
