package v8

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLayout is node 20's (V8 11.3) layout.
func testLayout() *Layout {
	return &Layout{
		Major: 11, Minor: 3, FunctionShared: 24, MapInstanceType: 12, BytecodeArrayHeader: 54,
		TypeSharedFunctionInfo: 262, TypeBytecodeArray: 191,
		SFIFunctionData: 8, SFINameOrScopeInfo: 16, SFIScript: 32,
		ScriptSource: 8, ScriptName: 16, ScriptLineEnds: 56, ArrayLength: 8, ArrayData: 16,
		BytecodeSourcePositions: 32, CodeBytecode: 16, InterpreterDataBytecode: 8, DebugInfoScript: 24, UncompiledStart: 16,
		StringLength: 12, SeqChars: 16, ConsFirst: 16, ConsSecond: 24, ThinActual: 16, SlicedParent: 16, SlicedOffset: 24,
		ExternalResourceData: 24, FirstNonstringType: 128, StringRepresentationMask: 7, StringEncMask: 8, OneByteTag: 8,
		SeqTag: 0, ConsTag: 1, ExternalTag: 2, SlicedTag: 3, ThinTag: 5,
		TypeScopeInfo: 261, TypeScript: 167, TypeFixedArray: 175, TypeCode: 245, TypeInterpreterData: 159, TypeDebugInfo: 153,
		TypePositionTables: []uint16{190}, TypeUncompiled: []uint16{220, 221, 222, 223}, Scope: oldScopes,
	}
}

// fakeMem is a process's memory: one region from fakeBase.
type fakeMem struct{ b []byte }

const fakeBase = 0x10000

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	if off < fakeBase || off-fakeBase+int64(len(p)) > int64(len(m.b)) {
		return 0, errors.New("unmapped")
	}
	return copy(p, m.b[off-fakeBase:]), nil
}

// alloc reserves n bytes (8-aligned) and returns their address.
func (m *fakeMem) alloc(n int) uint64 {
	a := uint64(fakeBase + len(m.b))
	m.b = append(m.b, make([]byte, (n+7)&^7)...)
	return a
}

func (m *fakeMem) put64(a, v uint64) { binary.LittleEndian.PutUint64(m.b[a-fakeBase:], v) }
func (m *fakeMem) put32(a uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.b[a-fakeBase:], v)
}

func smi(v int32) uint64 { return uint64(uint32(v)) << 32 }

// object allocates an object of size bytes whose map says instance type t;
// it returns it tagged.
func (m *fakeMem) object(t uint16, size int) uint64 {
	mp := m.alloc(16)
	binary.LittleEndian.PutUint16(m.b[mp-fakeBase+12:], t)
	o := m.alloc(size)
	m.put64(o, mp+1)
	return o + 1
}

func (m *fakeMem) seqString(s string) uint64 {
	o := m.object(8, 16+len(s)) // one-byte (8) sequential (0), internalized
	m.put32(o-1+12, uint32(len(s)))
	copy(m.b[o-1+16-fakeBase:], s)
	return o
}

func (m *fakeMem) twoByteString(s string) uint64 {
	u := utf16.Encode([]rune(s))
	o := m.object(0, 16+2*len(u))
	m.put32(o-1+12, uint32(len(u)))
	for i, c := range u {
		binary.LittleEndian.PutUint16(m.b[o-1+16+uint64(2*i)-fakeBase:], c)
	}
	return o
}

func (m *fakeMem) cons(first, second uint64, length int) uint64 {
	o := m.object(8|1, 32)
	m.put32(o-1+12, uint32(length))
	m.put64(o-1+16, first)
	m.put64(o-1+24, second)
	return o
}

func TestReadString(t *testing.T) {
	m := &fakeMem{}
	h := &heap{mem: m, l: testLayout()}
	hello := m.seqString("hello, ")
	world := m.twoByteString("wörld ✓ 𝄞")
	cons := m.cons(hello, world, 7+10)
	thin := m.object(8|5, 24)
	m.put32(thin-1+12, 17)
	m.put64(thin-1+16, cons)
	sliced := m.object(8|3, 32)
	m.put32(sliced-1+12, 5)
	m.put64(sliced-1+16, cons)
	m.put64(sliced-1+24, smi(7))
	data := m.alloc(8)
	copy(m.b[data-fakeBase:], "external")
	external := m.object(8|2, 32)
	m.put32(external-1+12, 8)
	m.put64(external-1+24, data)
	loop := m.cons(0, 0, 10)
	m.put64(loop-1+16, loop) // a cons string of itself
	notString := m.object(200, 16)
	negative := m.seqString("x")
	m.put32(negative-1+12, 0xffffffff)

	for _, c := range []struct {
		name   string
		tagged uint64
		max    int
		want   string
		err    string
	}{
		{"one byte", hello, 100, "hello, ", ""},
		{"truncated", hello, 4, "hell", ""},
		{"two byte", world, 100, "wörld ✓ 𝄞", ""},
		{"cons", cons, 100, "hello, wörld ✓ 𝄞", ""},
		{"cons truncated", cons, 9, "hello, wö", ""},
		{"thin", thin, 100, "hello, wörld ✓ 𝄞", ""},
		{"sliced", sliced, 100, "wörld", ""},
		{"external", external, 100, "external", ""},
		{"cycle", loop, 100, "", "nested too deep"},
		{"not a string", notString, 100, "", "not a string"},
		{"negative length", negative, 100, "", "negative length"},
		{"smi", smi(3), 100, "", "not a heap object"},
		{"unmapped", 0x7000001, 100, "", "unmapped"},
	} {
		got, err := h.readString(c.tagged, c.max)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}

	ends, err := h.lineEnds(m.seqString("a\nbc\n\nd"), maxSourceChars)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 4, 5, 7}, ends)
	ends, err = h.lineEnds(m.twoByteString("✓\n✓"), maxSourceChars)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 3}, ends)
}

func TestSmiValue(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want int32
		ok   bool
	}{
		{0, 0, true},
		{smi(37), 37, true},
		{smi(-1), -1, true},
		{smi(1<<31 - 1), 1<<31 - 1, true},
		{0x1001, 0, false},     // a pointer
		{smi(5) | 2, 0, false}, // low half not zero
	} {
		got, ok := smiValue(c.v)
		assert.Equal(t, c.ok, ok, "%#x", c.v)
		assert.Equal(t, c.want, got, "%#x", c.v)
	}
}

// spinTable is spin's source position table (names.js's spin, as node
// 18-24 write it): the entry, then the statements and expressions
// --print-bytecode shows.
var spinTable = []byte{0x01, 0x98, 0x01, 0x02, 0x40, 0x04, 0x48, 0x04, 0x14, 0x05, 0x00, 0x0a, 0x28, 0x05, 0x1c, 0x14, 0x2b, 0x0b, 0x5f, 0x06, 0xa8, 0x01, 0x04, 0x24}

func TestDecodePositions(t *testing.T) {
	got, err := decodePositions(spinTable)
	require.NoError(t, err)
	want := []positionEntry{
		{-1, 37, true}, {0, 53, true}, {2, 71, true}, {4, 76, true}, {6, 76, false}, {11, 86, true},
		{13, 93, false}, {23, 82, true}, {28, 58, false}, {31, 100, true}, {33, 109, true},
	}
	assert.Equal(t, want, got)
	for _, c := range []struct {
		off  int32
		want int32
	}{{0, 53}, {1, 53}, {12, 86}, {13, 93}, {27, 82}, {33, 109}, {500, 109}, {-1, 37}} {
		p, ok := positionAt(got, c.off)
		assert.True(t, ok)
		assert.Equal(t, c.want, p, "offset %d", c.off)
	}
	_, ok := positionAt(got, -2)
	assert.False(t, ok)

	for _, bad := range [][]byte{
		{0x01}, // no position
		{0x80}, // unfinished integer
		{0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // too long
		{0x02, 0x03}, // negative position
	} {
		_, err := decodePositions(bad)
		assert.Error(t, err, "% x", bad)
	}
}

func TestLineOf(t *testing.T) {
	ends := []int32{10, 20, 25} // three lines, the last ends the source
	for _, c := range []struct {
		pos  int32
		want int64
	}{{0, 1}, {10, 1}, {11, 2}, {20, 2}, {25, 3}, {26, 0}, {-1, 0}} {
		assert.Equal(t, c.want, lineOf(ends, c.pos), "position %d", c.pos)
	}
	assert.Equal(t, int64(0), lineOf(nil, 3))
}

func FuzzDecodePositions(f *testing.F) {
	f.Add(spinTable)
	f.Add([]byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodePositions(b)
		if err != nil {
			return
		}
		p, _ := positionAt(entries, 10)
		_ = lineOf([]int32{5, 10, 100}, p)
	})
}

// Whatever the memory holds, naming ends with a frame or an error.
func FuzzFrame(f *testing.F) {
	f.Add([]byte("\x01\x00\x01\x00\x00\x00\x00\x00"), uint16(0))
	f.Add(make([]byte, 64), uint16(8))
	f.Fuzz(func(t *testing.T, junk []byte, at uint16) {
		m := &fakeMem{}
		sfi := m.object(262, 48)
		region := m.alloc(len(junk) + 64)
		copy(m.b[region-fakeBase:], junk)
		// Point each field of the SFI into the junk.
		for off := uint64(8); off < 48; off += 8 {
			m.put64(sfi-1+off, region+uint64(at)%uint64(len(junk)+8)+1)
		}
		for i := 0; i+8 <= len(junk); i += 8 {
			if w := binary.LittleEndian.Uint64(junk[i:]); w&1 == 1 {
				// keep pointers inside the region
				m.put64(region+uint64(i), region+w%uint64(len(junk)+8)&^7+1)
			}
		}
		n := NewNamer(m, testLayout())
		for _, pos := range []uint32{0, 1, 5, positionUnknown} {
			_, _ = n.Frame(sfi, pos, time.Now())
		}
	})
}

func TestFrameWrongType(t *testing.T) {
	m := &fakeMem{}
	n := NewNamer(m, testLayout())
	_, err := n.Frame(m.seqString("not an SFI"), 0, time.Now())
	assert.ErrorIs(t, err, ErrWrongType)
	_, err = n.Frame(smi(1), 0, time.Now())
	assert.ErrorIs(t, err, ErrNotObject)
	assert.True(t, strings.HasPrefix(anonymous, "<"))
}
