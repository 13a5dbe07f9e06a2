// Package hotspot reads what a HotSpot JVM publishes about itself for
// out-of-process readers (serviceability agents, profilers): the tables of
// its C++ types, fields and constants that libjvm exports as gHotSpotVM*
// symbols. The profiler's HotSpot walker and namer take their offsets and
// addresses from them, so one reader follows every JDK release without a
// table of versions.
//
// Everything is read from the memory of the profiled process, which it
// controls: every read is bounded, every count and stride checked, and a
// JVM that has not filled its tables yet is told apart (ErrNotInitialised).
package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Symbols are the libjvm exports Read needs, with their run-time addresses.
// The entry layouts (offsets, strides) are variables libjvm sets at start.
var Symbols = []string{
	"gHotSpotVMStructs",
	"gHotSpotVMStructEntryTypeNameOffset",
	"gHotSpotVMStructEntryFieldNameOffset",
	"gHotSpotVMStructEntryTypeStringOffset",
	"gHotSpotVMStructEntryIsStaticOffset",
	"gHotSpotVMStructEntryOffsetOffset",
	"gHotSpotVMStructEntryAddressOffset",
	"gHotSpotVMStructEntryArrayStride",
	"gHotSpotVMTypes",
	"gHotSpotVMTypeEntryTypeNameOffset",
	"gHotSpotVMTypeEntrySuperclassNameOffset",
	"gHotSpotVMTypeEntrySizeOffset",
	"gHotSpotVMTypeEntryArrayStride",
	"gHotSpotVMIntConstants",
	"gHotSpotVMIntConstantEntryNameOffset",
	"gHotSpotVMIntConstantEntryValueOffset",
	"gHotSpotVMIntConstantEntryArrayStride",
	"gHotSpotVMLongConstants",
	"gHotSpotVMLongConstantEntryNameOffset",
	"gHotSpotVMLongConstantEntryValueOffset",
	"gHotSpotVMLongConstantEntryArrayStride",
}

// Field is a C++ field HotSpot describes.
type Field struct {
	Type    string // its C++ type, as HotSpot spells it
	Static  bool
	Offset  uint64 // in its object, for an instance field
	Address uint64 // in the process, for a static field
}

// Type is a C++ type HotSpot describes.
type Type struct {
	Super string // "" for none
	Size  uint64
}

// VMStructs are the tables of one JVM.
type VMStructs struct {
	Fields map[string]map[string]Field // by type name, then field name
	Types  map[string]Type
	Ints   map[string]int64
	Longs  map[string]int64
}

// ErrNotInitialised says the JVM has not filled its tables yet (it is
// starting): read again later.
var ErrNotInitialised = errors.New("the JVM has not published its type tables yet")

// Bounds on what a process can make Read do.
const (
	maxEntries   = 1 << 14 // entries per table (JDK 17: ~2300 fields, ~1500 types)
	maxStride    = 256     // bytes per entry
	maxNameLen   = 256     // bytes of a type, field or constant name
	maxReadBytes = 8 << 20 // of process memory in all
	entryBatch   = 64      // entries read at once
)

// Read reads the tables of the JVM whose memory is mem; addr gives the
// run-time address of each of Symbols (false: not exported).
func Read(mem io.ReaderAt, addr func(symbol string) (uint64, bool)) (*VMStructs, error) {
	r := &memReader{mem: mem, names: map[uint64]string{}}
	u64 := func(symbol string) (uint64, error) {
		a, ok := addr(symbol)
		if !ok {
			return 0, fmt.Errorf("libjvm exports no %s", symbol)
		}
		return r.u64(a)
	}
	vm := &VMStructs{Fields: map[string]map[string]Field{}, Types: map[string]Type{}, Ints: map[string]int64{}, Longs: map[string]int64{}}
	err := r.table(u64, "gHotSpotVMStructs", "gHotSpotVMStructEntry",
		[]string{"TypeName", "FieldName", "TypeString", "IsStatic", "Offset", "Address"},
		func(e entry) (bool, error) {
			typ, err := r.name(e.u64("TypeName"))
			if err != nil || typ == "" {
				return typ == "", err // a NULL type name ends the table
			}
			field, err := r.name(e.u64("FieldName"))
			if err != nil {
				return false, err
			}
			f := Field{Static: e.u32("IsStatic") != 0, Offset: e.u64("Offset"), Address: e.u64("Address")}
			if ts := e.u64("TypeString"); ts != 0 {
				if f.Type, err = r.name(ts); err != nil {
					return false, err
				}
			}
			if vm.Fields[typ] == nil {
				vm.Fields[typ] = map[string]Field{}
			}
			vm.Fields[typ][field] = f
			return false, nil
		})
	if err != nil {
		return nil, err
	}
	err = r.table(u64, "gHotSpotVMTypes", "gHotSpotVMTypeEntry", []string{"TypeName", "SuperclassName", "Size"},
		func(e entry) (bool, error) {
			typ, err := r.name(e.u64("TypeName"))
			if err != nil || typ == "" {
				return typ == "", err
			}
			t := Type{Size: e.u64("Size")}
			if s := e.u64("SuperclassName"); s != 0 {
				if t.Super, err = r.name(s); err != nil {
					return false, err
				}
			}
			vm.Types[typ] = t
			return false, nil
		})
	if err != nil {
		return nil, err
	}
	for _, c := range []struct {
		table, entry string
		into         map[string]int64
		int32        bool
	}{{"gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntry", vm.Ints, true}, {"gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntry", vm.Longs, false}} {
		err := r.table(u64, c.table, c.entry, []string{"Name", "Value"}, func(e entry) (bool, error) {
			name, err := r.name(e.u64("Name"))
			if err != nil || name == "" {
				return name == "", err
			}
			if c.int32 {
				c.into[name] = int64(int32(e.u32("Value")))
			} else {
				c.into[name] = int64(e.u64("Value"))
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return vm, nil
}

// entry is one table entry's bytes and where its fields are.
type entry struct {
	b       []byte
	offsets map[string]uint64
}

func (e entry) u64(field string) uint64 {
	return binary.LittleEndian.Uint64(e.b[e.offsets[field]:])
}

func (e entry) u32(field string) uint32 {
	return binary.LittleEndian.Uint32(e.b[e.offsets[field]:])
}

// memReader reads process memory within maxReadBytes, remembering names.
type memReader struct {
	mem   io.ReaderAt
	read  int
	names map[uint64]string // by address: type names repeat
	// block is the last aligned block read, at blockAddr: the fields of a
	// Method, a ConstMethod or a Symbol lie together, so one read of the
	// process's memory answers several.
	block     []byte
	blockAddr uint64
}

// readBlock is the size and alignment of the blocks memReader reads.
const readBlock = 256

func (r *memReader) bytes(addr uint64, n int) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("NULL pointer")
	}
	if addr > math.MaxInt64-uint64(n)-2*readBlock {
		return nil, fmt.Errorf("address %#x out of range", addr)
	}
	if n <= readBlock {
		if addr >= r.blockAddr && addr+uint64(n) <= r.blockAddr+uint64(len(r.block)) {
			off := addr - r.blockAddr
			return r.block[off : off+uint64(n) : off+uint64(n)], nil
		}
		if b, ok := r.readBlocks(addr, n); ok {
			return b, nil
		}
	}
	return r.exact(addr, n)
}

// readBlocks reads the aligned block (or two) holding n bytes at addr and
// keeps it; false when the process's memory ends before addr+n, as it may
// where addr is near the end of a mapping (then exact reads them alone).
func (r *memReader) readBlocks(addr uint64, n int) ([]byte, bool) {
	start := addr &^ (readBlock - 1)
	size := uint64(readBlock)
	if addr+uint64(n) > start+size {
		size += readBlock
	}
	if r.read += int(size); r.read > maxReadBytes {
		return nil, false
	}
	b := make([]byte, size)
	got, _ := r.mem.ReadAt(b, int64(start))
	if uint64(got) < addr-start+uint64(n) {
		return nil, false
	}
	r.block, r.blockAddr = b[:got], start
	off := addr - start
	return b[off : off+uint64(n) : off+uint64(n)], true
}

// exact reads n bytes at addr, nothing more.
func (r *memReader) exact(addr uint64, n int) ([]byte, error) {
	if r.read += n; r.read > maxReadBytes {
		return nil, fmt.Errorf("more than %d bytes of tables", maxReadBytes)
	}
	b := make([]byte, n)
	if got, err := r.mem.ReadAt(b, int64(addr)); got < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}

func (r *memReader) u64(addr uint64) (uint64, error) {
	b, err := r.bytes(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// name reads the NUL-terminated string at addr ("" for NULL), at most
// maxNameLen bytes, in short reads so a string near the end of a mapping
// is read.
func (r *memReader) name(addr uint64) (string, error) {
	if addr == 0 {
		return "", nil
	}
	if s, ok := r.names[addr]; ok {
		return s, nil
	}
	var out []byte
	for len(out) < maxNameLen {
		b, err := r.bytes(addr+uint64(len(out)), 32)
		if err != nil {
			return "", fmt.Errorf("name at %#x: %w", addr, err)
		}
		for i, c := range b {
			if c == 0 {
				s := string(append(out, b[:i]...))
				r.names[addr] = s
				return s, nil
			}
		}
		out = append(out, b...)
	}
	return "", fmt.Errorf("name at %#x longer than %d bytes", addr, maxNameLen)
}

// table reads the entries of one table until each returns true (its end),
// with the layout libjvm exports as <prefix><field>Offset and
// <prefix>ArrayStride.
func (r *memReader) table(u64 func(string) (uint64, error), array, prefix string, fields []string, each func(entry) (bool, error)) error {
	stride, err := u64(prefix + "ArrayStride")
	if err != nil {
		return err
	}
	if stride == 0 {
		return ErrNotInitialised
	}
	if stride > maxStride {
		return fmt.Errorf("%sArrayStride %d, at most %d", prefix, stride, maxStride)
	}
	offsets := map[string]uint64{}
	for _, f := range fields {
		off, err := u64(prefix + f + "Offset")
		if err != nil {
			return err
		}
		if stride < 8 || off > stride-8 { // no wrap: off comes from the process
			return fmt.Errorf("%s%sOffset %d outside an entry of %d bytes", prefix, f, off, stride)
		}
		offsets[f] = off
	}
	base, err := u64(array)
	if err != nil {
		return err
	}
	if base == 0 {
		return ErrNotInitialised
	}
	for i := 0; i < maxEntries; {
		n := entryBatch
		b, err := r.bytes(base+uint64(i)*stride, int(stride)*n)
		if err != nil {
			// The table may end near the end of its mapping: one by one.
			n = 1
			if b, err = r.bytes(base+uint64(i)*stride, int(stride)); err != nil {
				return fmt.Errorf("%s[%d]: %w", array, i, err)
			}
		}
		for j := range n {
			end, err := each(entry{b[j*int(stride) : (j+1)*int(stride)], offsets})
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", array, i+j, err)
			}
			if end {
				return nil
			}
		}
		i += n
	}
	return fmt.Errorf("%s: no end within %d entries", array, maxEntries)
}
