package ruby

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// The VM's symbol table, rb_symbols_t ruby_global_symbols (symbol.h,
// symbol.c; the same in 3.1.2 and 3.3.8): ids is an Array of Arrays of
// ID_ENTRY_UNIT serials, ID_ENTRY_SIZE VALUEs each (the name, a frozen
// String, then the Symbol). An ID's serial is id >> RUBY_ID_SCOPE_SHIFT,
// an operator's (id <= tLAST_OP_ID: '+', tCMP, tAREF) the id itself
// (rb_id_to_serial); Init_op_tbl registers the operators' names there too.
const (
	symbolsLastID = 0   // rb_symbols_t.last_id (rb_id_serial_t, uint32): the highest serial
	symbolsIDs    = 16  // rb_symbols_t.ids
	idEntryUnit   = 512 // ID_ENTRY_UNIT
	idEntrySize   = 2   // ID_ENTRY_SIZE
	idScopeShift  = 4   // RUBY_ID_SCOPE_SHIFT
	lastOpID      = 169 // tLAST_OP_ID (id.h; rb_is_const_id's `cmp $0xa9` in both builds)
	arrayHeapLen  = 16  // RArray.as.heap.len

	// maxSerial bounds last_id (a program interns far fewer names);
	// maxIDNames the names cached per process.
	maxSerial  = 1 << 24
	maxIDNames = 4096

	// symImmortalCount returns ruby_global_symbols.last_id: its code
	// holds the table's address (the table itself is hidden).
	symImmortalCount = "rb_sym_immortal_count"
)

// ErrNoSymbol means an ID's name was not found in the symbol table.
var ErrNoSymbol = errors.New("ruby: no name for the ID")

// SymbolsAddress is the link-time address of ruby_global_symbols, found
// in the code of the exported rb_sym_immortal_count (`return
// ruby_global_symbols.last_id;`): on x86-64 `[endbr64;] mov
// disp32(%rip),%eax` (8b 05 rel32), on arm64 `adrp xN, page; ldr wM,
// [xN, #imm]`. Debian's 3.1.2 amd64: 0x3af1c0, 3.3.8: 0x460160; arm64
// 0x380180, 0x460148 (objdump -d). Its initial last_id in .data
// (tNEXT_ID-1: 0xee in 3.1.2, 0xf1 in 3.3.8) is checked to be past the
// operators.
func SymbolsAddress(f *elf.File) (uint64, error) {
	fn, ok := definedSymbols(f, symVersion, symImmortalCount)[symImmortalCount]
	if !ok {
		return 0, fmt.Errorf("%w: no %s", ErrNoSymbol, symImmortalCount)
	}
	code, err := readFileData(f, fn.Value, 16)
	if err != nil || len(code) < 12 {
		return 0, fmt.Errorf("%w: read %s: %v", ErrNoSymbol, symImmortalCount, err)
	}
	var addr uint64
	switch f.Machine {
	case elf.EM_X86_64:
		at := 0
		if code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa { // endbr64
			at = 4
		}
		if code[at] == 0x8b && code[at+1]&0xc7 == 0x05 { // mov disp32(%rip), r32
			rel := int32(binary.LittleEndian.Uint32(code[at+2:]))
			addr = uint64(int64(fn.Value) + int64(at+6) + int64(rel))
		}
	case elf.EM_AARCH64:
		adrp, ldr := binary.LittleEndian.Uint32(code), binary.LittleEndian.Uint32(code[4:])
		if adrp&0x9f000000 == 0x90000000 && ldr&0xffc00000 == 0xb9400000 && ldr>>5&31 == adrp&31 {
			imm := int64(adrp>>29&3|(adrp>>5&0x7ffff)<<2) << 43 >> 31
			addr = uint64(int64(fn.Value&^0xfff)+imm) + uint64(ldr>>10&0xfff)*4
		}
	}
	if addr == 0 {
		return 0, fmt.Errorf("%w: no load of last_id in %s (%s)", ErrNoSymbol, symImmortalCount, f.Machine)
	}
	b, err := readFileData(f, addr+symbolsLastID, 4)
	if err != nil || len(b) < 4 {
		return 0, fmt.Errorf("%w: ruby_global_symbols at %#x is not in the file's data: %v", ErrNoSymbol, addr, err)
	}
	if last := binary.LittleEndian.Uint32(b); last <= lastOpID || last > 4096 {
		return 0, fmt.Errorf("%w: ruby_global_symbols at %#x starts at serial %d", ErrNoSymbol, addr, last)
	}
	return addr, nil
}

// IDName is the name of the ID id ("times", "+", "[]") in the symbol
// table at symbols (ruby_global_symbols in the process): the String of
// its serial in ids, as get_id_serial_entry reads it. Reads are bounded
// and checked (types, lengths); ErrNoSymbol when the table holds no name.
func (l *Layout) IDName(mem io.ReaderAt, symbols, id uint64) (string, error) {
	serial := id
	if id > lastOpID {
		serial = id >> idScopeShift
	}
	h, err := runtimes.ReadMem(mem, symbols, symbolsIDs+8)
	if err != nil {
		return "", fmt.Errorf("read the symbol table at %#x: %w", symbols, err)
	}
	last := uint64(binary.LittleEndian.Uint32(h[symbolsLastID:]))
	if serial == 0 || serial > last || last > maxSerial {
		return "", fmt.Errorf("%w: ID %#x (serial %d of %d)", ErrNoSymbol, id, serial, last)
	}
	unit, err := l.arrayEntry(mem, binary.LittleEndian.Uint64(h[symbolsIDs:]), serial/idEntryUnit)
	if err != nil {
		return "", fmt.Errorf("%w: ID %#x: %v", ErrNoSymbol, id, err)
	}
	str, err := l.arrayEntry(mem, unit, serial%idEntryUnit*idEntrySize)
	if err != nil {
		return "", fmt.Errorf("%w: ID %#x: %v", ErrNoSymbol, id, err)
	}
	name, err := l.readString(mem, str)
	if err != nil || name == "" {
		return "", fmt.Errorf("%w: ID %#x: %v", ErrNoSymbol, id, err)
	}
	return name, nil
}

// MethodOriginalID is the ID a method was defined with
// (me->def->original_id) of the method entry at me.
func (l *Layout) MethodOriginalID(mem io.ReaderAt, me uint64) (uint64, error) {
	b, err := runtimes.ReadMem(mem, me+uint64(l.MethodEntryDef), 8)
	if err != nil {
		return 0, fmt.Errorf("read the definition of method entry %#x: %w", me, err)
	}
	def := binary.LittleEndian.Uint64(b)
	if b, err = runtimes.ReadMem(mem, def+uint64(l.MethodDefOriginalID), 8); err != nil {
		return 0, fmt.Errorf("read method definition %#x: %w", def, err)
	}
	return binary.LittleEndian.Uint64(b), nil
}

// arrayEntry is element i of the Array at ary (embedded or on the heap),
// an error past its length or where ary is no Array.
func (l *Layout) arrayEntry(mem io.ReaderAt, ary, i uint64) (uint64, error) {
	if special(ary) {
		return 0, fmt.Errorf("no Array: %#x", ary)
	}
	h, err := runtimes.ReadMem(mem, ary, int(l.ArrayHeapPtr)+8)
	if err != nil {
		return 0, err
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tArray {
		return 0, fmt.Errorf("not an Array at %#x (flags %#x)", ary, flags)
	}
	n, elems := (flags&l.ArrayEmbedMask)>>arrayEmbedSh, ary+arrayEmbed
	if flags&flNoEmbed == 0 { // RARRAY_EMBED_FLAG clear: on the heap
		n, elems = binary.LittleEndian.Uint64(h[arrayHeapLen:]), binary.LittleEndian.Uint64(h[l.ArrayHeapPtr:])
	}
	if i >= n {
		return 0, fmt.Errorf("element %d of an Array of %d at %#x", i, n, ary)
	}
	b, err := runtimes.ReadMem(mem, elems+i*8, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}
