package hotspot

import (
	"errors"
	"fmt"
	"strings"
)

// Layout is what the HotSpot walker and namer need of one JVM build, taken
// from its VMStructs: offsets of fields in objects (bytes), addresses of
// static fields, sizes of types. Names in comments are HotSpot's.
type Layout struct {
	// The code cache: CodeCache::_heaps (a GrowableArray<CodeHeap*>*) and
	// the bounds of all its heaps, static fields read at these addresses.
	HeapsAddr, LowBoundAddr, HighBoundAddr uint64
	ArrayLen, ArrayData                    uint64 // GrowableArrayBase::_len, GrowableArray<int>::_data
	// A CodeHeap: its memory and segment map (VirtualSpace _low, _high),
	// and log2 of its segment size.
	HeapMemory, HeapSegmap, HeapLog2Segment uint64
	SpaceLow, SpaceHigh                     uint64
	// HeapBlock::Header, at the start of each block of a heap: its size in
	// bytes (the blob follows it).
	BlockHeaderSize uint64
	// CodeBlob: its name (const char*), size and frame size in words.
	BlobName, BlobSize, BlobFrameSize uint64
	// Where the blob's instructions start: the offset from the blob of a
	// CodeBlob::_code_offset (JDK 23 on), or of an address field,
	// CodeBlob::_code_begin (before).
	BlobCode         uint64
	BlobCodeIsOffset bool
	// nmethod::_method (CompiledMethod::_method before JDK 23).
	NMethodMethod uint64
	// Method::_constMethod; ConstMethod::_constants, _name_index,
	// _signature_index, and its size (the bytecodes follow it).
	MethodConst, ConstMethodConstants, ConstMethodName, ConstMethodSignature, ConstMethodSize uint64
	// ConstantPool::_pool_holder, _source_file_name_index, its size (its
	// slots follow it); Klass::_name; Symbol::_length (u2) and _body.
	PoolHolder, PoolSourceFile, PoolSize, KlassName, SymbolLength, SymbolBody uint64
	// Where the source file's index is not the pool's but the class's
	// (InstanceKlass::_source_file_name_index, JDK 11): PoolSourceFile is
	// its offset in the InstanceKlass, whose pool, InstanceKlass::_constants
	// at KlassConstants, it indexes.
	SourceFileInKlass bool
	KlassConstants    uint64
}

// FieldOf finds field in typ or, inherited, in its superclasses.
func (vm *VMStructs) FieldOf(typ, field string) (Field, bool) {
	for range 16 { // inheritance chains are short; bounds a cyclic table
		if f, ok := vm.Fields[typ][field]; ok {
			return f, true
		}
		if typ = vm.Types[typ].Super; typ == "" {
			break
		}
	}
	return Field{}, false
}

// instanceField returns the first of fields (type, field) that vm has as
// an instance field, its own or inherited.
func (vm *VMStructs) instanceField(fields ...[2]string) (Field, bool) {
	for _, tf := range fields {
		if f, ok := vm.FieldOf(tf[0], tf[1]); ok && !f.Static {
			return f, true
		}
	}
	return Field{}, false
}

// NewLayout derives the Layout of vm's JVM, or names every missing part.
func NewLayout(vm *VMStructs) (*Layout, error) {
	var missing []string
	offset := func(typ, field string) uint64 {
		f, ok := vm.FieldOf(typ, field)
		if !ok || f.Static {
			missing = append(missing, typ+"::"+field)
		}
		return f.Offset
	}
	static := func(typ, field string) uint64 {
		f, ok := vm.FieldOf(typ, field)
		if !ok || !f.Static || f.Address == 0 {
			missing = append(missing, typ+"::"+field+" (static)")
		}
		return f.Address
	}
	size := func(typ string) uint64 {
		t, ok := vm.Types[typ]
		if !ok || t.Size == 0 {
			missing = append(missing, "sizeof "+typ)
		}
		return t.Size
	}
	l := &Layout{
		HeapsAddr:            static("CodeCache", "_heaps"),
		LowBoundAddr:         static("CodeCache", "_low_bound"),
		HighBoundAddr:        static("CodeCache", "_high_bound"),
		ArrayData:            offset("GrowableArray<int>", "_data"),
		HeapMemory:           offset("CodeHeap", "_memory"),
		HeapSegmap:           offset("CodeHeap", "_segmap"),
		HeapLog2Segment:      offset("CodeHeap", "_log2_segment_size"),
		SpaceLow:             offset("VirtualSpace", "_low"),
		SpaceHigh:            offset("VirtualSpace", "_high"),
		BlockHeaderSize:      size("HeapBlock"),
		BlobName:             offset("CodeBlob", "_name"),
		BlobSize:             offset("CodeBlob", "_size"),
		BlobFrameSize:        offset("CodeBlob", "_frame_size"),
		NMethodMethod:        offset("nmethod", "_method"),
		MethodConst:          offset("Method", "_constMethod"),
		ConstMethodConstants: offset("ConstMethod", "_constants"),
		ConstMethodName:      offset("ConstMethod", "_name_index"),
		ConstMethodSignature: offset("ConstMethod", "_signature_index"),
		ConstMethodSize:      size("ConstMethod"),
		PoolHolder:           offset("ConstantPool", "_pool_holder"),
		PoolSize:             size("ConstantPool"),
		KlassName:            offset("Klass", "_name"),
		SymbolLength:         offset("Symbol", "_length"),
	}
	// The symbol's bytes: an array field, named with its first index from
	// JDK 17 on.
	if f, ok := vm.FieldOf("Symbol", "_body[0]"); ok {
		l.SymbolBody = f.Offset
	} else {
		l.SymbolBody = offset("Symbol", "_body")
	}
	// The length of a GrowableArray is in its untyped base class,
	// GrowableArrayBase, GenericGrowableArray before (JDK 11); the tables
	// do not name it as GrowableArray<int>'s superclass.
	if f, ok := vm.instanceField([2]string{"GrowableArrayBase", "_len"}, [2]string{"GenericGrowableArray", "_len"}); ok {
		l.ArrayLen = f.Offset
	} else {
		missing = append(missing, "GrowableArrayBase::_len (or GenericGrowableArray::_len)")
	}
	// The index of the class's SourceFile attribute: the constant pool's,
	// the InstanceKlass's before (JDK 11).
	if f, ok := vm.instanceField([2]string{"ConstantPool", "_source_file_name_index"}); ok {
		l.PoolSourceFile = f.Offset
	} else if f, ok := vm.instanceField([2]string{"InstanceKlass", "_source_file_name_index"}); ok {
		l.PoolSourceFile, l.SourceFileInKlass = f.Offset, true
		l.KlassConstants = offset("InstanceKlass", "_constants")
	} else {
		missing = append(missing, "ConstantPool::_source_file_name_index (or InstanceKlass::_source_file_name_index)")
	}
	if f, ok := vm.FieldOf("CodeBlob", "_code_offset"); ok {
		l.BlobCode, l.BlobCodeIsOffset = f.Offset, true
	} else {
		l.BlobCode = offset("CodeBlob", "_code_begin")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrIncomplete, strings.Join(missing, ", "))
	}
	return l, nil
}

// ErrIncomplete says a JVM's tables lack what the walker needs: its Java
// frames are left to the native walk.
var ErrIncomplete = errors.New("the JVM's tables lack")
