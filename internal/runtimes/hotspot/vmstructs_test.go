package hotspot

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMem is process memory: bytes at addresses from base.
type fakeMem struct {
	base uint64
	b    []byte
}

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	if a < m.base || a >= m.base+uint64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[a-m.base:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// image lays out a JVM's exported tables the way libjvm does.
type image struct {
	mem  fakeMem
	syms map[string]uint64
}

func newImage() *image { return &image{mem: fakeMem{base: 0x10000}, syms: map[string]uint64{}} }

func (im *image) alloc(n int) uint64 {
	a := im.mem.base + uint64(len(im.mem.b))
	im.mem.b = append(im.mem.b, make([]byte, (n+7)&^7)...)
	return a
}

func (im *image) put64(a, v uint64) { binary.LittleEndian.PutUint64(im.mem.b[a-im.mem.base:], v) }

func (im *image) str(s string) uint64 {
	a := im.alloc(len(s) + 1)
	copy(im.mem.b[a-im.mem.base:], s)
	return a
}

// variable exports a uint64 variable holding v.
func (im *image) variable(name string, v uint64) {
	a := im.alloc(8)
	im.put64(a, v)
	im.syms[name] = a
}

// table exports a table of entries (each a list of words, strings as
// pointers), its stride and field offsets, ended by a zero entry.
func (im *image) table(array, prefix string, fields []string, entries [][]any) {
	stride := uint64(8 * len(fields))
	im.variable(prefix+"ArrayStride", stride)
	for i, f := range fields {
		im.variable(prefix+f+"Offset", uint64(8*i))
	}
	base := im.alloc(int(stride) * (len(entries) + 1))
	for i, e := range entries {
		for j, v := range e {
			w, ok := v.(uint64)
			if s, isStr := v.(string); isStr {
				w, ok = im.str(s), true
			}
			if ok {
				im.put64(base+uint64(i)*stride+uint64(8*j), w)
			}
		}
	}
	im.variable(array, base)
}

func (im *image) addr(name string) (uint64, bool) { a, ok := im.syms[name]; return a, ok }

func jvmImage() *image {
	im := newImage()
	im.table("gHotSpotVMStructs", "gHotSpotVMStructEntry", []string{"TypeName", "FieldName", "TypeString", "IsStatic", "Offset", "Address"}, [][]any{
		{"CodeBlob", "_name", "const char*", uint64(0), uint64(8), uint64(0)},
		{"CodeCache", "_heaps", "GrowableArray<CodeHeap*>*", uint64(1), uint64(0), uint64(0x7000)},
		{"CompiledMethod", "_method", "Method*", uint64(0), uint64(112), uint64(0)},
	})
	im.table("gHotSpotVMTypes", "gHotSpotVMTypeEntry", []string{"TypeName", "SuperclassName", "Size"}, [][]any{
		{"CodeBlob", uint64(0), uint64(64)},
		{"CompiledMethod", "CodeBlob", uint64(192)},
		{"nmethod", "CompiledMethod", uint64(352)},
	})
	im.table("gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntry", []string{"Name", "Value"}, [][]any{
		{"frame::interpreter_frame_last_sp_offset", uint64(0xfffffffe)},
	})
	im.table("gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntry", []string{"Name", "Value"}, [][]any{
		{"markWord::hash_mask", uint64(0x7fffffff)},
	})
	return im
}

func TestRead(t *testing.T) {
	im := jvmImage()
	vm, err := Read(&im.mem, im.addr)
	require.NoError(t, err)
	assert.Equal(t, Field{Type: "GrowableArray<CodeHeap*>*", Static: true, Address: 0x7000}, vm.Fields["CodeCache"]["_heaps"])
	f, ok := vm.FieldOf("nmethod", "_method")
	assert.True(t, ok, "inherited from CompiledMethod")
	assert.Equal(t, uint64(112), f.Offset)
	assert.Equal(t, Type{Super: "CompiledMethod", Size: 352}, vm.Types["nmethod"])
	assert.Equal(t, int64(-2), vm.Ints["frame::interpreter_frame_last_sp_offset"], "int constants are 32-bit")
	assert.Equal(t, int64(0x7fffffff), vm.Longs["markWord::hash_mask"])
	_, err = NewLayout(vm)
	assert.ErrorIs(t, err, ErrIncomplete)
	assert.ErrorContains(t, err, "CodeCache::_low_bound (static)", "every missing part is named")
}

func TestReadHostileTables(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(im *image)
		want   string
	}{
		{"not initialised", func(im *image) { im.put64(im.syms["gHotSpotVMStructEntryArrayStride"], 0) }, ErrNotInitialised.Error()},
		{"no table yet", func(im *image) { im.put64(im.syms["gHotSpotVMTypes"], 0) }, ErrNotInitialised.Error()},
		{"huge stride", func(im *image) { im.put64(im.syms["gHotSpotVMStructEntryArrayStride"], 1<<20) }, "at most 256"},
		{"offset outside the entry", func(im *image) { im.put64(im.syms["gHotSpotVMTypeEntrySizeOffset"], 64) }, "outside an entry"},
		{"offset that wraps past the entry", func(im *image) { im.put64(im.syms["gHotSpotVMTypeEntrySizeOffset"], ^uint64(5)) }, "outside an entry"},
		{"stride shorter than a field", func(im *image) { im.put64(im.syms["gHotSpotVMTypeEntryArrayStride"], 4) }, "outside an entry"},
		{"table out of memory", func(im *image) { im.put64(im.syms["gHotSpotVMStructs"], 0xdead0000) }, "gHotSpotVMStructs[0]"},
		{"missing export", func(im *image) { delete(im.syms, "gHotSpotVMLongConstants") }, "exports no gHotSpotVMLongConstants"},
		{"unterminated name", func(im *image) {
			a := im.alloc(maxNameLen + 64)
			for i := range maxNameLen + 64 {
				im.mem.b[a-im.mem.base+uint64(i)] = 'x'
			}
			base := im.mem.b[im.syms["gHotSpotVMTypes"]-im.mem.base:]
			im.put64(binary.LittleEndian.Uint64(base), a)
		}, "longer than 256 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			im := jvmImage()
			tt.change(im)
			_, err := Read(&im.mem, im.addr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// readCounter counts the reads made through it; all or nothing fails a
// read that runs past the end of mem whole, as a kernel may.
type readCounter struct {
	mem          *fakeMem
	allOrNothing bool
	reads        int
}

func (c *readCounter) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	if c.allOrNothing && uint64(off)+uint64(len(p)) > c.mem.base+uint64(len(c.mem.b)) {
		return 0, errors.New("input/output error")
	}
	return c.mem.ReadAt(p, off)
}

// memReader reads aligned blocks: fields that lie together cost one read
// of the process's memory; a field near the end of its mapping, where a
// block would run past it, is read alone; bytes come back as they are.
func TestMemReaderBlocks(t *testing.T) {
	mem := &fakeMem{base: 0x10000, b: make([]byte, 3*readBlock+40)}
	for i := range mem.b {
		mem.b[i] = byte(i * 7)
	}
	at := func(a uint64, n int) []byte { return mem.b[a-mem.base : a-mem.base+uint64(n)] }
	for _, tc := range []struct {
		name         string
		reads        []uint64 // addresses of 8-byte reads, in order
		allOrNothing bool
		calls        int
	}{
		{"one block", []uint64{0x10000, 0x10008, 0x100f8, 0x10010}, false, 1},
		{"two blocks", []uint64{0x10000, 0x10100, 0x10008}, false, 3}, // the third is in the first block, no longer kept
		{"straddling", []uint64{0x100fc, 0x10100, 0x101f8}, false, 1},
		{"the end of memory", []uint64{0x10300, 0x10320}, false, 1},                // the block's part that is there
		{"the end of memory, all or nothing", []uint64{0x10300, 0x10320}, true, 4}, // each: the block, then alone
		{"past the end", []uint64{0x10328}, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &readCounter{mem: mem, allOrNothing: tc.allOrNothing}
			r := &memReader{mem: c}
			for _, a := range tc.reads {
				b, err := r.bytes(a, 8)
				if a+8 > mem.base+uint64(len(mem.b)) {
					require.Error(t, err)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, at(a, 8), b, "at %#x", a)
			}
			require.Equal(t, tc.calls, c.reads)
		})
	}
}
