package ruby

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Relocation types of a TLS slot in the GOT.
const (
	rX8664DTPOff64  = 17   // R_X86_64_DTPOFF64: tls_index.offset
	rAArch64TLSDesc = 1031 // R_AARCH64_TLSDESC: a TLS descriptor
)

// ErrNoECTLS means ruby_current_ec's TLS slot was not found in the file.
var ErrNoECTLS = errors.New("ruby: ruby_current_ec's TLS slot not found")

// ECTLS is where the TLS variable ruby_current_ec (the running thread's
// rb_execution_context_t*) is, from the file alone.
type ECTLS struct {
	// Offset is the variable's offset in libruby's TLS block (the
	// module's PT_TLS segment): the symbol's st_value where the file
	// exports it (3.1), else the offset of the GOT slot the code of
	// rb_thread_current uses (3.3).
	Offset uint64
	// Slot is the link-time address of that GOT slot: on x86-64 a
	// general dynamic tls_index {module id, offset} (__tls_get_addr's
	// argument), on arm64 a TLS descriptor {resolver, argument}. The
	// process's copy, relocated by ld.so, gives the module id (x86-64)
	// or the thread-pointer offset of a static TLS block (arm64,
	// _dl_tlsdesc_return's argument): docs/ruby-layouts.md.
	Slot uint64
}

// ECTLSOffset finds ruby_current_ec's TLS slot and offset in f by
// decoding the exported rb_thread_current (GET_EC() first): on x86-64
// `lea tls_index(%rip),%rdi` (66 48 8d 3d rel32) before the call of
// __tls_get_addr; on arm64 the TLS descriptor sequence `adrp xN, page;
// ldr xM, [xN, lo]; add x0, xN, lo; blr xM`, following one `bl` first
// (3.3's rb_thread_current calls GET_EC's out-of-line copy). The offset
// is the DTPOFF64 (x86-64) or TLSDESC (arm64) relocation's symbol value
// plus addend at the slot, or the slot's word in the file where the
// linker resolved it (x86-64, a hidden symbol).
func ECTLSOffset(f *elf.File) (ECTLS, error) {
	syms := definedSymbols(f, symVersion, symCurrentEC, symThreadCurrent)
	fn, ok := syms[symThreadCurrent]
	if !ok {
		return ECTLS{}, fmt.Errorf("%w: no %s", ErrNoECTLS, symThreadCurrent)
	}
	var slot uint64
	switch f.Machine {
	case elf.EM_X86_64:
		if code, err := readFileData(f, fn.Value, 32); err == nil {
			slot = tlsIndexOf(code, fn.Value)
		}
	case elf.EM_AARCH64:
		slot = tlsDescOf(f, fn.Value, 2)
	}
	if slot == 0 {
		return ECTLS{}, fmt.Errorf("%w: no TLS access in %s's code (%s)", ErrNoECTLS, symThreadCurrent, f.Machine)
	}
	out := ECTLS{Slot: slot}
	if s, ok := syms[symCurrentEC]; ok && elf.ST_TYPE(s.Info) == elf.STT_TLS {
		out.Offset = s.Value
		return out, nil
	}
	off, err := slotOffset(f, slot)
	if err != nil {
		return ECTLS{}, err
	}
	out.Offset = off
	return out, nil
}

// tlsIndexOf finds the general dynamic TLS sequence's `lea tls_index(%rip),
// %rdi` (66 48 8d 3d rel32, before the call of __tls_get_addr) in the x86-64
// code at addr, and returns the tls_index's address, or 0.
func tlsIndexOf(code []byte, addr uint64) uint64 {
	i := bytes.Index(code, []byte{0x66, 0x48, 0x8d, 0x3d})
	if i < 0 || i+8 > len(code) {
		return 0
	}
	rel := int32(binary.LittleEndian.Uint32(code[i+4:]))
	return uint64(int64(addr) + int64(i+8) + int64(rel))
}

// tlsDescOf finds the TLS descriptor sequence in the arm64 code at addr
// (its first 16 instructions; a `bl` before it is followed, depth times
// at most) and returns the descriptor's address, or 0.
func tlsDescOf(f *elf.File, addr uint64, depth int) uint64 {
	code, err := readFileData(f, addr, 64)
	if err != nil {
		return 0
	}
	var page [32]uint64 // adrp's page per register, 0 when unknown
	desc := uint64(0)
	for i := 0; i+4 <= len(code); i += 4 {
		pc := addr + uint64(i)
		w := binary.LittleEndian.Uint32(code[i:])
		switch {
		case w&0x9f000000 == 0x90000000: // adrp xd, label
			imm := int64(w>>29&3|(w>>5&0x7ffff)<<2) << 43 >> 31 // sign-extended (immhi:immlo) << 12
			page[w&31] = uint64(int64(pc&^0xfff) + imm)
		case w&0xffc00000 == 0x91000000: // add xd, xn, #imm12 (no shift)
			if p := page[w>>5&31]; p != 0 {
				desc = p + uint64(w>>10&0xfff)
			}
		case w&0xfffffc1f == 0xd63f0000: // blr xn: the resolver's call
			if desc != 0 {
				return desc
			}
		case w&0xfc000000 == 0x94000000: // bl label
			if depth > 0 && desc == 0 {
				target := uint64(int64(pc) + int64(int32(w<<6)>>4))
				return tlsDescOf(f, target, depth-1)
			}
		case w == 0xd65f03c0: // ret
			return 0
		}
	}
	return 0
}

// slotOffset is the TLS offset a GOT slot at slot holds: the symbol value
// plus addend of its DTPOFF64 (x86-64, at slot+8) or TLSDESC (arm64, at
// slot) relocation, else (x86-64) the word at slot+8 in the file.
func slotOffset(f *elf.File, slot uint64) (uint64, error) {
	at, typ := slot+8, uint32(rX8664DTPOff64)
	if f.Machine == elf.EM_AARCH64 {
		at, typ = slot, rAArch64TLSDesc
	}
	var symbols []elf.Symbol
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Size%24 != 0 || s.Size > 1<<28 { //nolint:misspell // ELF's name
			continue
		}
		b := make([]byte, s.Size)
		if _, err := io.ReadFull(s.Open(), b); err != nil {
			return 0, fmt.Errorf("ruby: read %s: %w", s.Name, err)
		}
		for ; len(b) >= 24; b = b[24:] {
			info := binary.LittleEndian.Uint64(b[8:])
			if binary.LittleEndian.Uint64(b) != at || uint32(info) != typ {
				continue
			}
			off := binary.LittleEndian.Uint64(b[16:])
			if sym := info >> 32; sym != 0 {
				if symbols == nil {
					var err error
					if symbols, err = f.DynamicSymbols(); err != nil {
						return 0, fmt.Errorf("ruby: TLS relocation's symbol: %w", err)
					}
				}
				if sym > uint64(len(symbols)) {
					return 0, fmt.Errorf("%w: TLS relocation's symbol %d of %d", ErrNoECTLS, sym, len(symbols))
				}
				off += symbols[sym-1].Value // DynamicSymbols leaves out the null symbol 0
			}
			return off, nil
		}
	}
	if f.Machine == elf.EM_AARCH64 {
		return 0, fmt.Errorf("%w: no TLSDESC relocation at %#x", ErrNoECTLS, slot)
	}
	b, err := readFileData(f, slot+8, 8)
	if err != nil {
		return 0, fmt.Errorf("%w: tls_index at %#x: %v", ErrNoECTLS, slot, err)
	}
	return binary.LittleEndian.Uint64(b), nil
}
