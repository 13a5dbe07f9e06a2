package v8

import (
	"debug/elf"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The code layout of each node major: the numbers measured (code.go),
// those v8dbg has taken from the binary.
func TestCodeLayout(t *testing.T) {
	want := map[int]CodeLayout{
		18: {Inline: true, Start: 128, Size: 40, Deopt: 16, Positions: 24, DeoptTypes: []uint16{179}, Inlining: 7, Literals: 2},
		20: {StreamCode: 8, CodeStream: 32, CodeStart: 40, Size: 48, Deopt: 16, Positions: 24, DeoptTypes: []uint16{175}, Inlining: 7, Literals: 2},
		22: {StreamCode: 8, CodeStream: 32, CodeStart: 40, Size: 52, Deopt: 8, Positions: 16, DeoptTypes: []uint16{174, 213, 211}, Inlining: 7, Literals: 2},
		24: {StreamCode: 8, CodeStream: 32, CodeStart: 40, Size: 56, Deopt: 8, Positions: 16, DeoptTypes: []uint16{205, 197, 193}, Inlining: 8, Literals: 3,
			TypeWrapper: 195, Wrapped: 8},
	}
	for _, major := range testutil.NodeMajors {
		t.Run(strconv.Itoa(major), func(t *testing.T) {
			f, err := elf.Open(testutil.Node(t, major))
			require.NoError(t, err)
			defer f.Close()
			l, err := ReadLayout(f)
			require.NoError(t, err)
			require.True(t, l.HasCode)
			assert.Equal(t, want[major], l.Code)
		})
	}
}

// Code position tables keep the inlining id; InliningPositions decode
// 16 bytes each.
func TestCodePositions(t *testing.T) {
	// Entries (code offset, raw): (0, script offset 9, not inlined),
	// (12, script offset 40 in inlined function 0), (30, back to 20).
	raw := func(off, inl int64) int64 { return (off+1)<<1 | (inl+1)<<31 }
	var b []byte
	var code, prev int64
	for _, e := range [][3]int64{{0, 9, -1}, {12, 40, 0}, {30, 20, -1}} {
		b = appendVLQ(b, e[0]-code) // statements: the delta as is
		r := raw(e[1], e[2])
		b = appendVLQ(b, r-prev)
		code, prev = e[0], r
	}
	got, err := decodeCodePositions(b)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, tt := range []struct {
		off          int32
		script, inID int32
	}{{0, 9, -1}, {11, 9, -1}, {12, 40, 0}, {29, 40, 0}, {30, 20, -1}, {400, 20, -1}} {
		r, ok := rawAt(got, tt.off)
		require.True(t, ok)
		assert.Equal(t, tt.script, scriptOffset(r), "at %d", tt.off)
		assert.Equal(t, tt.inID, inliningID(r), "at %d", tt.off)
	}
	_, err = decodeCodePositions([]byte{0x80})
	assert.Error(t, err)

	pod := make([]byte, 40) // two entries and a partial one
	binary.LittleEndian.PutUint64(pod, uint64(raw(7, -1)))
	binary.LittleEndian.PutUint32(pod[8:], 3)
	binary.LittleEndian.PutUint64(pod[16:], uint64(raw(8, 0)))
	assert.Equal(t, []inliningPosition{{raw(7, -1), 3}, {raw(8, 0), 0}}, decodeInlining(pod))
}

// appendVLQ appends v zigzag VLQ encoded, as V8 writes its tables.
func appendVLQ(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// Compiled on made-up memory around the pc never panics or hangs, in
// either code layout.
func FuzzCompiled(f *testing.F) {
	f.Add(make([]byte, 64), uint16(8), false)
	f.Add([]byte("\x01\x00\x01\x00\x00\x00\x00\x00\x09\x00\x01\x00\x00\x00\x00\x00"), uint16(0), true)
	f.Fuzz(func(t *testing.T, junk []byte, at uint16, inline bool) {
		m := &fakeMem{}
		sfi := m.object(262, 48)
		region := m.alloc(2*codeScanChunk + len(junk))
		base := region + codeScanChunk
		copy(m.b[base-fakeBase:], junk)
		for i := 0; i+8 <= len(junk); i += 8 {
			if w := binary.LittleEndian.Uint64(junk[i:]); w&1 == 1 {
				m.put64(base+uint64(i), base+w%uint64(len(junk)+8)&^7+1) // pointers stay inside
			}
		}
		l := testLayout()
		l.TypeCode, l.HasCode = 245, true
		l.Code = CodeLayout{StreamCode: 8, CodeStream: 32, CodeStart: 40, Size: 48, Deopt: 16, Positions: 24,
			DeoptTypes: []uint16{175}, Inlining: 7, Literals: 2}
		if inline {
			l.Code = CodeLayout{Inline: true, Start: 128, Size: 40, Deopt: 16, Positions: 24, DeoptTypes: []uint16{175}, Inlining: 7, Literals: 2}
		}
		n := NewNamer(m, l)
		pc := base + uint64(at)%uint64(len(junk)+1)
		now := time.Now()
		_, _ = n.Compiled(sfi, pc, now, func(sfi uint64) (runtimes.Frame, error) { return n.Frame(sfi, 0, now) })
	})
}

// Code near the start of the memory (its search's first chunk begins
// below it) is found from the part of the chunk in its page; pc past the
// nearest code object's end is in none.
func TestFindCodeNearMappingStart(t *testing.T) {
	m := &fakeMem{}
	code := m.object(245, 128+64) // inline: instructions at +128, 64 bytes
	m.put32(code-1+40, 64)
	m.alloc(1 << 14) // room above, so reads of pcs stay inside
	l := testLayout()
	l.TypeCode, l.HasCode = 245, true
	l.Code = CodeLayout{Inline: true, Start: 128, Size: 40, Deopt: 16, Positions: 24, DeoptTypes: []uint16{175}, Inlining: 7, Literals: 2}
	n := NewNamer(m, l)
	start := code - 1 + 128
	require.Less(t, start-codeScanChunk, uint64(fakeBase), "the first chunk begins below the memory")
	c, err := n.codes.find(start + 16)
	require.NoError(t, err)
	assert.Equal(t, [3]uint64{start, start + 64, code}, [3]uint64{c.start, c.end, c.code})
	_, err = n.codes.find(start + 64 + 8)
	assert.ErrorIs(t, err, errNoCode)
}
