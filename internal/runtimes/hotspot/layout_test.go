package hotspot

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jdk17Tables are the parts of OpenJDK 17's VMStructs NewLayout reads,
// with the offsets and sizes OpenJDK 17.0 publishes on x86-64.
func jdk17Tables() *VMStructs {
	f := func(off uint64) Field { return Field{Offset: off} }
	s := func(addr uint64) Field { return Field{Static: true, Address: addr} }
	return &VMStructs{
		Fields: map[string]map[string]Field{
			"CodeCache":          {"_heaps": s(0x7000), "_low_bound": s(0x7008), "_high_bound": s(0x7010)},
			"GrowableArrayBase":  {"_len": f(0), "_max": f(4)},
			"GrowableArray<int>": {"_data": f(8)},
			"CodeHeap":           {"_memory": f(8), "_segmap": f(120), "_log2_segment_size": f(256)},
			"VirtualSpace":       {"_low": f(16), "_high": f(24)},
			"CodeBlob":           {"_name": f(96), "_size": f(12), "_frame_size": f(28), "_code_begin": f(32)},
			"CompiledMethod":     {"_method": f(112)},
			"Method":             {"_constMethod": f(8)},
			"ConstMethod":        {"_constants": f(8), "_name_index": f(34), "_signature_index": f(36)},
			"ConstantPool":       {"_pool_holder": f(24), "_source_file_name_index": f(54)},
			"Klass":              {"_name": f(24)},
			"Symbol":             {"_length": f(4), "_body": f(6), "_body[0]": f(6)},
		},
		Types: map[string]Type{
			"HeapBlock":      {Size: 16},
			"ConstMethod":    {Super: "MetaspaceObj", Size: 48},
			"ConstantPool":   {Super: "Metadata", Size: 72},
			"CompiledMethod": {Super: "CodeBlob", Size: 192},
			"nmethod":        {Super: "CompiledMethod", Size: 352},
			"InstanceKlass":  {Super: "Klass", Size: 456},
		},
		Ints: map[string]int64{"frame::interpreter_frame_last_sp_offset": -2},
	}
}

// NewLayout follows the names each JDK gives the fields it needs.
func TestNewLayoutVersions(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(vm *VMStructs)
		check  func(t *testing.T, l *Layout)
		err    string // a missing part NewLayout names
	}{
		{name: "JDK 17", check: func(t *testing.T, l *Layout) {
			assert.Equal(t, uint64(0), l.ArrayLen)
			assert.Equal(t, uint64(54), l.PoolSourceFile)
			assert.False(t, l.SourceFileInKlass)
			assert.Equal(t, uint64(32), l.BlobCode)
			assert.False(t, l.BlobCodeIsOffset)
			assert.Equal(t, uint64(112), l.NMethodMethod, "CompiledMethod's")
		}},
		{name: "JDK 11: GenericGrowableArray, the source file in the class", change: func(vm *VMStructs) {
			// OpenJDK 11.0.32's names and offsets.
			delete(vm.Fields, "GrowableArrayBase")
			vm.Fields["GenericGrowableArray"] = map[string]Field{"_len": {Offset: 0}, "_max": {Offset: 4}}
			vm.Fields["GrowableArray<int>"]["_data"] = Field{Offset: 24}
			delete(vm.Fields["ConstantPool"], "_source_file_name_index")
			vm.Fields["InstanceKlass"] = map[string]Field{"_source_file_name_index": {Offset: 298}, "_constants": {Offset: 232}}
			vm.Fields["Symbol"]["_length"] = Field{Offset: 0}
		}, check: func(t *testing.T, l *Layout) {
			assert.Equal(t, uint64(0), l.ArrayLen)
			assert.Equal(t, uint64(24), l.ArrayData)
			assert.True(t, l.SourceFileInKlass)
			assert.Equal(t, uint64(298), l.PoolSourceFile)
			assert.Equal(t, uint64(232), l.KlassConstants)
		}},
		{name: "JDK 23 on: _code_offset, nmethod's own _method", change: func(vm *VMStructs) {
			// Temurin 25's.
			delete(vm.Fields["CodeBlob"], "_code_begin")
			vm.Fields["CodeBlob"]["_code_offset"] = Field{Offset: 36}
			delete(vm.Fields, "CompiledMethod")
			vm.Fields["nmethod"] = map[string]Field{"_method": {Offset: 80}}
			vm.Types["nmethod"] = Type{Super: "CodeBlob", Size: 256}
		}, check: func(t *testing.T, l *Layout) {
			assert.Equal(t, uint64(36), l.BlobCode)
			assert.True(t, l.BlobCodeIsOffset)
			assert.Equal(t, uint64(80), l.NMethodMethod)
		}},
		{name: "the base class's _len wins over the old name", change: func(vm *VMStructs) {
			vm.Fields["GenericGrowableArray"] = map[string]Field{"_len": {Offset: 99}}
		}, check: func(t *testing.T, l *Layout) { assert.Equal(t, uint64(0), l.ArrayLen) }},
		{name: "the pool's index wins over the class's", change: func(vm *VMStructs) {
			vm.Fields["InstanceKlass"] = map[string]Field{"_source_file_name_index": {Offset: 298}, "_constants": {Offset: 232}}
		}, check: func(t *testing.T, l *Layout) {
			assert.False(t, l.SourceFileInKlass)
			assert.Equal(t, uint64(54), l.PoolSourceFile)
		}},
		{name: "no GrowableArray length", change: func(vm *VMStructs) {
			delete(vm.Fields, "GrowableArrayBase")
		}, err: "GrowableArrayBase::_len (or GenericGrowableArray::_len)"},
		{name: "a static GrowableArray length", change: func(vm *VMStructs) {
			vm.Fields["GrowableArrayBase"]["_len"] = Field{Static: true, Address: 0x1000}
		}, err: "GrowableArrayBase::_len"},
		{name: "no source file index", change: func(vm *VMStructs) {
			delete(vm.Fields["ConstantPool"], "_source_file_name_index")
		}, err: "ConstantPool::_source_file_name_index (or InstanceKlass::_source_file_name_index)"},
		{name: "the class's index without its pool", change: func(vm *VMStructs) {
			delete(vm.Fields["ConstantPool"], "_source_file_name_index")
			vm.Fields["InstanceKlass"] = map[string]Field{"_source_file_name_index": {Offset: 298}}
		}, err: "InstanceKlass::_constants"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vm := jdk17Tables()
			if tt.change != nil {
				tt.change(vm)
			}
			l, err := NewLayout(vm)
			if tt.err != "" {
				assert.ErrorIs(t, err, ErrIncomplete)
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			tt.check(t, l)
		})
	}
}

// ReadMethod finds the source file through the pool that holds its index:
// the method's constant pool, or (JDK 11) the class's.
func TestReadMethodSourceFile(t *testing.T) {
	base := Layout{MethodConst: 8, ConstMethodConstants: 8, ConstMethodName: 34, ConstMethodSignature: 36,
		PoolHolder: 24, PoolSize: 72, KlassName: 24, SymbolLength: 4, SymbolBody: 6}
	for _, tt := range []struct {
		name        string
		inKlass     bool
		sourceIndex uint16
		want        string
	}{
		{name: "in the pool", sourceIndex: 3, want: "Spin.java"},
		{name: "in the class, indexing the class's pool", inKlass: true, sourceIndex: 2, want: "Spin.java"},
		{name: "no SourceFile attribute", sourceIndex: 0, want: ""},
		{name: "no SourceFile attribute, in the class", inKlass: true, sourceIndex: 0, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			im := newImage()
			put16 := func(a uint64, v uint16) { binary.LittleEndian.PutUint16(im.mem.b[a-im.mem.base:], v) }
			symbol := func(s string) uint64 {
				a := im.alloc(6 + len(s))
				put16(a+4, uint16(len(s)))
				copy(im.mem.b[a+6-im.mem.base:], s)
				return a
			}
			pool := func(slots ...string) uint64 {
				cp := im.alloc(72 + 8*len(slots))
				for i, s := range slots {
					if s != "" {
						im.put64(cp+72+8*uint64(i), symbol(s))
					}
				}
				return cp
			}
			// The method's pool: slot 2 is the signature, which a source
			// index of the class read in the method's pool would give.
			cp := pool("", "spin", "(J)J", "Spin.java")
			classPool := pool("", "", "Spin.java")
			klass := im.alloc(320)
			im.put64(klass+24, symbol("pkg/Spin"))
			im.put64(cp+24, klass)
			cm := im.alloc(48)
			im.put64(cm+8, cp)
			put16(cm+34, 1)
			put16(cm+36, 2)
			method := im.alloc(16)
			im.put64(method+8, cm)

			l := base
			if tt.inKlass {
				l.SourceFileInKlass, l.PoolSourceFile, l.KlassConstants = true, 298, 232
				im.put64(klass+232, classPool)
				put16(klass+298, tt.sourceIndex)
			} else {
				l.PoolSourceFile = 54
				put16(cp+54, tt.sourceIndex)
			}
			m, err := ReadMethod(&im.mem, &l, method)
			require.NoError(t, err)
			assert.Equal(t, Method{Class: "pkg.Spin", Name: "spin", Signature: "(J)J", SourceFile: tt.want}, m)
		})
	}
}
