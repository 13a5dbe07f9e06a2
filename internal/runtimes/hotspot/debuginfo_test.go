package hotspot

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// UNSIGNED5 as HotSpot writes it, without (JDK 11-17) and with (JDK 21 on)
// the excluded byte 0.
func TestStreamNumbers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		b      []byte
		x      uint32
		want   uint32
		signed int32
	}{
		{"one byte", []byte{5}, 0, 5, -3},
		{"one byte, excluded 0", []byte{6}, 1, 5, -3},
		{"two bytes", []byte{200, 3}, 0, 200 + 3<<6, 196},
		{"two bytes, excluded 0", []byte{201, 4}, 1, 200 + 3<<6, 196},
		{"five bytes at most, wrapping as a jint", []byte{255, 255, 255, 255, 255, 9}, 0, 51130559, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &stream{b: tt.b, x: tt.x}
			assert.Equal(t, tt.want, s.uint())
			assert.NoError(t, s.err)
			if tt.signed != 0 {
				s = &stream{b: tt.b, x: tt.x}
				assert.Equal(t, tt.signed, s.signed())
			}
		})
	}
	s := &stream{b: []byte{200}}
	s.uint()
	assert.ErrorIs(t, s.err, errStreamEnd, "a number cut short")
}

// A compressed line table: (bci 0, line 10) escaped, then (bci 2, line 11)
// in one byte, then the end.
func TestLineAt(t *testing.T) {
	table := []byte{0xff, 0, 20, 2<<3 | 1, 0}
	for bci, want := range map[int]int64{0: 10, 1: 10, 2: 11, 7: 11} {
		assert.Equal(t, want, lineAt(table, bci, 0), "bci %d", bci)
	}
	assert.True(t, pairsEnd(&stream{b: table}))
	assert.False(t, pairsEnd(&stream{b: table[:3]}), "no end byte yet")
	withX := []byte{0xff, 1, 21, 2<<3 | 1, 0}
	assert.Equal(t, int64(11), lineAt(withX, 2, 1))
}

// countingMem counts the bytes read through it.
type countingMem struct {
	mem   io.ReaderAt
	bytes int
}

func (c *countingMem) ReadAt(p []byte, off int64) (int, error) {
	c.bytes += len(p)
	return c.mem.ReadAt(p, off)
}

// An nmethod (the pre-JDK 23 layout) whose pc 0x20 runs method 0xa0 at
// bci 3 inlined into 0xb0 at bci 7: Scopes finds both, innermost first; a
// DebugCache reads its PcDescs once per compilation.
func TestScopesAndTheirCache(t *testing.T) {
	const blob = 0x10000
	b := make([]byte, 0x400)
	put32 := func(at int, v uint32) { binary.LittleEndian.PutUint32(b[at:], v) }
	d := &DebugLayout{PcDescSize: 16, PcOffset: 0, PcScope: 4, CompileID: 0x08, ScopesPcs: 0x10, PcsEnd: 0x14, ScopesData: 0x18, MetadataAt: 0x20}
	put32(0x08, 41)    // compile id
	put32(0x10, 0x100) // PcDescs at blob+0x100
	put32(0x14, 0x140) // ... four of them
	binary.LittleEndian.PutUint64(b[0x18:], blob+0x200)
	put32(0x20, 0x300) // metadata at blob+0x300
	for i, pd := range [][2]uint32{{0x10, 0}, {0x28, 5}, {0x40, 0}, {0x50, 0}} {
		put32(0x100+16*i, pd[0])
		put32(0x100+16*i+4, pd[1])
	}
	// Scope at 5: sender 1, method index 1, bci 3 (+1); at 1: end, index 2, bci 7.
	copy(b[0x205:], []byte{1, 1, 4})
	copy(b[0x201:], []byte{0, 2, 8})
	binary.LittleEndian.PutUint64(b[0x300:], 0xa0)
	binary.LittleEndian.PutUint64(b[0x308:], 0xb0)
	mem := &countingMem{mem: &fakeMem{base: blob, b: b}}
	var cache DebugCache
	got, err := Scopes(mem, d, blob, blob, blob+0x20, &cache)
	require.NoError(t, err)
	assert.Equal(t, []scope{{0xa0, 3}, {0xb0, 7}}, got)
	first := mem.bytes
	_, err = Scopes(mem, d, blob, blob, blob+0x20, &cache)
	require.NoError(t, err)
	assert.Less(t, mem.bytes-first, first-64, "PcDescs read once")
	put32(0x08, 42) // recompiled at the same address
	before := mem.bytes
	_, err = Scopes(mem, d, blob, blob, blob+0x20, &cache)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, mem.bytes-before, 64, "a new compilation is read anew")
}

// A line table longer than a read's piece, with an escaped pair cut at the
// piece's end, is read whole (and no further than its end byte).
func TestReadLineTable(t *testing.T) {
	var table []byte
	for range 254 {
		table = append(table, 1<<3|1) // bci +1, line +1
	}
	table = append(table, 0xff, 4, 200, 0, 0) // bci +2, line +100 (two bytes, the second 0), cut at byte 256
	mem := &fakeMem{base: 0x1000, b: append(append([]byte{}, table...), make([]byte, 600)...)}
	got, err := readLineTable(&memReader{mem: mem}, 0x1000, 0)
	require.NoError(t, err)
	assert.Equal(t, table, got)
	assert.Equal(t, int64(254+100), lineAt(got, 256, 0))
}
