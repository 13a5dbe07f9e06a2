package usdt

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
)

// ArgKind is where an argument's value is at the probe site.
type ArgKind uint8

const (
	ArgConst    ArgKind = iota + 1 // the value itself (Value)
	ArgRegister                    // in a register (RegOffset)
	ArgMemory                      // in memory at a register plus Offset
)

// Arg is how to fetch one probe argument from the registers at the site.
type Arg struct {
	Kind ArgKind
	// Size is the value's size in bytes (1, 2, 4 or 8); Signed says it
	// sign-extends (a negative size in the spec).
	Size   uint8
	Signed bool
	// Reg is the register's name as written ("rdi", "edi", "x0", "sp");
	// RegOffset its offset in the kernel's struct pt_regs of the file's
	// machine.
	Reg       string
	RegOffset uint16
	Offset    int64 // ArgMemory: added to the register
	Value     int64 // ArgConst
}

// maxArgs is the most arguments a probe has (sys/sdt.h: 12).
const maxArgs = 12

// ParseArgs reads a probe's argument specs ("-4@%edi 8@-8(%rbp) 8@$5" on
// x86-64, "-4@x0 8@[sp, 16] 4@5" on arm64) for machine m. A form the
// probes' fetch does not do (an index register, a symbol) is an error
// naming the spec.
func ParseArgs(m elf.Machine, specs string) ([]Arg, error) {
	fields, err := SplitArgs(m, specs)
	if err != nil {
		return nil, err
	}
	args := make([]Arg, 0, len(fields))
	for _, spec := range fields {
		a, err := ParseArg(m, spec)
		if err != nil {
			return nil, fmt.Errorf("argument %d %q: %w", len(args), spec, err)
		}
		args = append(args, a)
	}
	return args, nil
}

// SplitArgs splits a probe's argument specs into one spec per argument,
// so a probe whose other arguments ParseArg refuses can still fetch the
// ones it reads.
func SplitArgs(m elf.Machine, specs string) ([]string, error) {
	fields := strings.Fields(specs)
	if m == elf.EM_AARCH64 {
		fields = joinBrackets(fields)
	}
	if len(fields) > maxArgs {
		return nil, fmt.Errorf("%d arguments, more than %d", len(fields), maxArgs)
	}
	return fields, nil
}

// joinBrackets joins arm64's "8@[sp," "16]" back into one spec.
func joinBrackets(fields []string) []string {
	var out []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		for strings.Contains(f, "[") && !strings.Contains(f, "]") && i+1 < len(fields) {
			i++
			f += " " + fields[i]
		}
		out = append(out, f)
	}
	return out
}

// ParseArg reads one argument's spec (SplitArgs) for machine m.
func ParseArg(m elf.Machine, spec string) (Arg, error) {
	size, loc, ok := strings.Cut(spec, "@")
	if !ok {
		return Arg{}, fmt.Errorf("no size@location")
	}
	n, err := strconv.Atoi(size)
	if err != nil {
		return Arg{}, fmt.Errorf("size: %w", err)
	}
	a := Arg{Signed: n < 0}
	if n < 0 {
		n = -n
	}
	switch n {
	case 1, 2, 4, 8:
		a.Size = uint8(n)
	default:
		return Arg{}, fmt.Errorf("a size of %d bytes", n)
	}
	switch m {
	case elf.EM_X86_64:
		err = a.locationX86(loc)
	case elf.EM_AARCH64:
		err = a.locationARM64(loc)
	default:
		err = fmt.Errorf("no argument fetch for %v", m)
	}
	return a, err
}

// locationX86 reads "%reg", "$imm", "off(%reg)" or "(%reg)".
func (a *Arg) locationX86(loc string) error {
	switch {
	case strings.HasPrefix(loc, "$"):
		v, err := strconv.ParseInt(loc[1:], 0, 64)
		if err != nil {
			return fmt.Errorf("constant: %w", err)
		}
		a.Kind, a.Value = ArgConst, v
		return nil
	case strings.HasPrefix(loc, "%"):
		a.Kind = ArgRegister
		return a.register(x86Registers, loc[1:])
	}
	off, reg, ok := strings.Cut(loc, "(")
	if !ok || !strings.HasSuffix(reg, ")") || !strings.HasPrefix(reg, "%") || strings.Contains(reg, ",") {
		return fmt.Errorf("not a register, a constant or off(%%reg)")
	}
	a.Kind = ArgMemory
	if off != "" {
		v, err := strconv.ParseInt(off, 0, 64)
		if err != nil {
			return fmt.Errorf("offset %q: not a number (a symbol?)", off)
		}
		a.Offset = v
	}
	return a.register(x86Registers, strings.TrimSuffix(reg[1:], ")"))
}

// locationARM64 reads "xN", "wN", "sp", "imm", "[reg]" or "[reg, off]".
func (a *Arg) locationARM64(loc string) error {
	if inner, ok := strings.CutPrefix(loc, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok {
			return fmt.Errorf("unclosed [")
		}
		reg, off, hasOff := strings.Cut(inner, ",")
		a.Kind = ArgMemory
		if hasOff {
			v, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(off), "#"), 0, 64)
			if err != nil {
				return fmt.Errorf("offset %q: %w", off, err)
			}
			a.Offset = v
		}
		return a.register(arm64Registers, strings.TrimSpace(reg))
	}
	if v, err := strconv.ParseInt(strings.TrimPrefix(loc, "#"), 0, 64); err == nil {
		a.Kind, a.Value = ArgConst, v
		return nil
	}
	a.Kind = ArgRegister
	return a.register(arm64Registers, loc)
}

func (a *Arg) register(regs map[string]uint16, name string) error {
	off, ok := regs[name]
	if !ok {
		return fmt.Errorf("register %q: not one the fetch reads", name)
	}
	a.Reg, a.RegOffset = name, off
	return nil
}

// x86Registers are x86-64's general registers, by each name of theirs
// whose value starts at the register's low byte (not ah, bh, ch, dh),
// at their offset in struct pt_regs (arch/x86/include/asm/ptrace.h).
var x86Registers = func() map[string]uint16 {
	m := map[string]uint16{}
	add := func(off uint16, names ...string) {
		for _, n := range names {
			m[n] = off
		}
	}
	add(0, "r15", "r15d", "r15w", "r15b")
	add(8, "r14", "r14d", "r14w", "r14b")
	add(16, "r13", "r13d", "r13w", "r13b")
	add(24, "r12", "r12d", "r12w", "r12b")
	add(32, "rbp", "ebp", "bp", "bpl")
	add(40, "rbx", "ebx", "bx", "bl")
	add(48, "r11", "r11d", "r11w", "r11b")
	add(56, "r10", "r10d", "r10w", "r10b")
	add(64, "r9", "r9d", "r9w", "r9b")
	add(72, "r8", "r8d", "r8w", "r8b")
	add(80, "rax", "eax", "ax", "al")
	add(88, "rcx", "ecx", "cx", "cl")
	add(96, "rdx", "edx", "dx", "dl")
	add(104, "rsi", "esi", "si", "sil")
	add(112, "rdi", "edi", "di", "dil")
	add(128, "rip", "eip")
	add(152, "rsp", "esp", "sp", "spl")
	return m
}()

// arm64Registers are arm64's registers x0-x30 (and their w halves) and
// sp, at their offset in struct user_pt_regs.
var arm64Registers = func() map[string]uint16 {
	m := map[string]uint16{"sp": 31 * 8}
	for i := range 31 {
		m["x"+strconv.Itoa(i)] = uint16(8 * i)
		m["w"+strconv.Itoa(i)] = uint16(8 * i)
	}
	return m
}()
