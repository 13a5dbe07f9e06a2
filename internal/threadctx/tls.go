// Package threadctx finds and decodes the thread context OpenTelemetry SDKs
// publish (OTEP 4947): each thread's ELF TLS pointer otel_thread_ctx_v1 to
// a record of its trace id, span id, flags and attributes. This package
// says, per process, where the pointer is from a thread's thread pointer
// (the BPF samplers read it when they take a sample), and decodes the
// records' attributes. Everything read from the process is untrusted.
package threadctx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
)

// Symbol is the TLS variable SDKs publish the context through.
const Symbol = "otel_thread_ctx_v1"

// Location says where a thread's otel_thread_ctx_v1 is, from its thread
// pointer tp: at tp + Offset when Module is 0 (static TLS: the executable,
// and libraries given static TLS), else at Offset in module Module's block
// of the thread's dynamic thread vector (a library with dynamic TLS).
type Location struct {
	Offset int64
	Module uint64
}

// Errors of Resolve; they wrap these.
var (
	ErrNoSymbol   = errors.New("no " + Symbol + " TLS symbol")
	ErrNoTLS      = errors.New("no TLS segment")
	ErrNoReloc    = errors.New("no relocation of " + Symbol + " a reader can follow")
	ErrUnresolved = errors.New(Symbol + "'s TLS descriptor is not resolved yet")
	ErrMachine    = errors.New("machine not supported")
)

// arch is what differs between the machines' TLS ABIs.
type arch struct {
	tlsdesc, dtpmod, dtpoff, tpoff uint32
	// tcbSize is the thread control block's size before the executable's
	// block (TLS variant I, arm64); 0 for variant II (x86-64), where the
	// blocks are below the thread pointer.
	tcbSize   uint64
	variantII bool
	dtvSlot   uint64 // where the thread control block holds the vector's address
}

var arches = map[elf.Machine]arch{
	elf.EM_X86_64: {tlsdesc: uint32(elf.R_X86_64_TLSDESC), dtpmod: uint32(elf.R_X86_64_DTPMOD64),
		dtpoff: uint32(elf.R_X86_64_DTPOFF64), tpoff: uint32(elf.R_X86_64_TPOFF64), variantII: true, dtvSlot: 8},
	elf.EM_AARCH64: {tlsdesc: uint32(elf.R_AARCH64_TLSDESC), dtpmod: uint32(elf.R_AARCH64_TLS_DTPMOD64),
		dtpoff: uint32(elf.R_AARCH64_TLS_DTPREL64), tpoff: uint32(elf.R_AARCH64_TLS_TPREL64), tcbSize: 16},
}

func symbol(f *elf.File) (int, elf.Symbol, error) {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: []string{Symbol}})
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return 0, elf.Symbol{}, fmt.Errorf("read .dynsym: %w", err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_TLS && s.Section != elf.SHN_UNDEF {
			return s.Index, s.Symbol, nil
		}
	}
	return 0, elf.Symbol{}, ErrNoSymbol
}

// ResolveExecutable returns the Location of otel_thread_ctx_v1 defined in
// the process's executable f (module 1, static TLS: where its linker put
// it, relaxed to local-exec, and where glibc and musl put the block).
func ResolveExecutable(f *elf.File) (Location, error) {
	_, sym, err := symbol(f)
	if err != nil {
		return Location{}, err
	}
	off, err := StaticOffset(f, sym)
	return Location{Offset: off}, err
}

// StaticOffset returns where the TLS symbol sym of executable f is from a
// thread's thread pointer: where glibc and musl put the executable's block
// (module 1, static TLS).
func StaticOffset(f *elf.File, sym elf.Symbol) (int64, error) {
	a, ok := arches[f.Machine]
	if !ok {
		return 0, fmt.Errorf("%w: %v", ErrMachine, f.Machine)
	}
	var tls *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			tls = p
		}
	}
	if tls == nil {
		return 0, ErrNoTLS
	}
	align := max(tls.Align, 1)
	if align&(align-1) != 0 || align > 1<<20 || tls.Memsz > 1<<30 || sym.Value >= tls.Memsz {
		return 0, fmt.Errorf("%w: size %d, alignment %d, symbol at %d", ErrNoTLS, tls.Memsz, tls.Align, sym.Value)
	}
	// The block's first byte keeps the segment's misalignment (glibc's
	// l_tls_firstbyte_offset).
	first := tls.Vaddr & (align - 1)
	if a.variantII {
		// Below the thread pointer, ending at it.
		firstByte := -first & (align - 1)
		off := roundUp(tls.Memsz-firstByte, align) + firstByte
		return int64(sym.Value) - int64(off), nil
	}
	// Above the thread control block.
	off := roundUp(a.tcbSize, align)
	if off-a.tcbSize < first {
		off += align
	}
	return int64(off-first) + int64(sym.Value), nil
}

// Address returns the variable's address in the thread whose thread
// pointer is tp on machine m, reading the thread's dynamic thread vector
// from mem for a dynamic block: what the BPF samplers do (bpf/threadctx.h).
func (l Location) Address(mem io.ReaderAt, tp uint64, m elf.Machine) (uint64, error) {
	a, ok := arches[m]
	if !ok {
		return 0, fmt.Errorf("%w: %v", ErrMachine, m)
	}
	if l.Module == 0 {
		return tp + uint64(l.Offset), nil
	}
	dtv, err := readWord(mem, tp+a.dtvSlot)
	if err != nil {
		return 0, err
	}
	// glibc's vector: its length in the element before the one the TCB
	// points at, then one 16-byte element per module (the block first).
	length, err := readWord(mem, dtv-16)
	if err != nil {
		return 0, err
	}
	if l.Module > length {
		return 0, fmt.Errorf("module %d beyond the thread's vector (%d)", l.Module, length)
	}
	block, err := readWord(mem, dtv+16*l.Module)
	if err != nil {
		return 0, err
	}
	if block == 0 || block == ^uint64(0) {
		return 0, fmt.Errorf("module %d's block not allocated in this thread", l.Module)
	}
	return block + uint64(l.Offset), nil
}

func roundUp(n, align uint64) uint64 { return (n + align - 1) &^ (align - 1) }

// Module is a file that defines otel_thread_ctx_v1, as read once for the
// processes that map it.
type Module struct {
	executable bool
	static     Location // the executable's
	a          arch
	relocs     []elf.Rela64 // a library's relocations of the variable
	loads      [][2]uint64  // a library's PT_LOAD ranges (file addresses)
}

// Prepare reads what locating the variable in a process needs from f;
// ErrNoSymbol when f does not define it. An executable (ET_EXEC, or
// position independent with an interpreter or DF_1_PIE) has it at a fixed
// offset from the thread pointer; a library, where the dynamic linker put
// its block (read from the process, see Locate).
func Prepare(f *elf.File) (*Module, error) {
	a, ok := arches[f.Machine]
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrMachine, f.Machine)
	}
	index, _, err := symbol(f)
	if err != nil {
		return nil, err
	}
	m := &Module{a: a}
	if Executable(f) {
		if m.static, err = ResolveExecutable(f); err != nil {
			return nil, err
		}
		m.executable = true
		return m, nil
	}
	if m.relocs, err = relocations(f, index); err != nil {
		return nil, err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			m.loads = append(m.loads, [2]uint64{p.Vaddr, p.Vaddr + p.Memsz})
		}
	}
	return m, nil
}

// Executable says whether f is a process's executable, not a library:
// ET_EXEC, or position independent with an interpreter or DF_1_PIE.
func Executable(f *elf.File) bool {
	if f.Type == elf.ET_EXEC {
		return true
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	flags, err := f.DynValue(elf.DT_FLAGS_1)
	return err == nil && len(flags) > 0 && flags[0]&uint64(elf.DF_1_PIE) != 0
}

// Locate returns where the variable is in the threads of a process that
// maps the module with load bias bias and whose memory is mem: a library's
// GOT holds it, written by the dynamic linker at one of the variable's
// relocations (a TLS descriptor, a general dynamic module and offset pair,
// or an initial-exec offset). ErrUnresolved: not written yet (a lazily
// bound descriptor); ask again later.
func (m *Module) Locate(mem io.ReaderAt, bias uint64) (Location, error) {
	if m.executable {
		return m.static, nil
	}
	var gd, lastErr error = nil, ErrNoReloc
	for _, r := range m.relocs {
		slot := bias + r.Off
		switch uint32(r.Info) {
		case m.a.tpoff:
			v, err := readWord(mem, slot)
			if err != nil {
				return Location{}, err
			}
			return Location{Offset: int64(v)}, nil
		case m.a.tlsdesc:
			loc, err := m.descriptor(mem, slot, bias)
			if err == nil {
				return loc, nil
			}
			lastErr = err
		case m.a.dtpmod:
			module, err := readWord(mem, slot)
			if err != nil {
				return Location{}, err
			}
			offset, err := readWord(mem, slot+8)
			if err != nil {
				return Location{}, err
			}
			if module == 0 || module > 1<<16 || offset > 1<<30 {
				gd = fmt.Errorf("%w: module %d, offset %d", ErrUnresolved, module, offset)
				continue
			}
			return Location{Module: module, Offset: int64(offset)}, nil
		}
	}
	if gd != nil {
		return Location{}, gd
	}
	return Location{}, lastErr
}

// descriptor reads the TLS descriptor at slot: the resolver's address, then
// its argument. Resolved for static TLS, the argument is the variable's
// offset from the thread pointer (below it on x86-64: negative); for
// dynamic TLS, a pointer to the module and offset (glibc's
// tlsdesc_dynamic_arg). Unresolved (lazy binding), it points at f's own
// relocation.
func (m *Module) descriptor(mem io.ReaderAt, slot, bias uint64) (Location, error) {
	a := m.a
	arg, err := readWord(mem, slot+8)
	if err != nil {
		return Location{}, err
	}
	for _, l := range m.loads {
		if arg >= bias+l[0] && arg < bias+l[1] {
			return Location{}, ErrUnresolved
		}
	}
	static := int64(arg)
	if a.variantII && static < 0 && static > -(1<<30) {
		return Location{Offset: static}, nil
	}
	if !a.variantII && static > 0 && static < 1<<16 {
		return Location{Offset: static}, nil
	}
	var dyn [16]byte
	if _, err := mem.ReadAt(dyn[:], int64(arg&(1<<63-1))); err == nil {
		module, offset := binary.LittleEndian.Uint64(dyn[:]), binary.LittleEndian.Uint64(dyn[8:])
		if module >= 1 && module <= 1<<16 && offset < 1<<30 {
			return Location{Module: module, Offset: int64(offset)}, nil
		}
	}
	if !a.variantII && static > 0 && static < 1<<30 {
		return Location{Offset: static}, nil // a large static block
	}
	return Location{}, fmt.Errorf("%w: descriptor argument %#x", ErrNoReloc, arg)
}

// relocations returns f's dynamic relocations of the dynamic symbol index
// (with addends: both machines use them).
func relocations(f *elf.File, index int) ([]elf.Rela64, error) {
	var out []elf.Rela64
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Size > 64<<20 { //nolint:misspell // ELF's name
			continue
		}
		if link := int(s.Link); link >= len(f.Sections) || f.Sections[link].Type != elf.SHT_DYNSYM {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Name, err)
		}
		for i := 0; i+24 <= len(b); i += 24 {
			r := elf.Rela64{Off: binary.LittleEndian.Uint64(b[i:]), Info: binary.LittleEndian.Uint64(b[i+8:]),
				Addend: int64(binary.LittleEndian.Uint64(b[i+16:]))}
			if int(r.Info>>32) == index {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoReloc
	}
	return out, nil
}

func readWord(mem io.ReaderAt, addr uint64) (uint64, error) {
	var b [8]byte
	if addr >= 1<<63 {
		return 0, fmt.Errorf("address %#x out of range", addr)
	}
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		return 0, fmt.Errorf("read %#x: %w", addr, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
