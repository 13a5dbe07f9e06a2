package cpython

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The fixtures' lines were checked against the interpreters' own decoders
// (dis.findlinestarts on 3.9, co_lines() on 3.10, 3.11 and 3.13) after
// code.replace(co_lnotab/co_linetable=fixture).
func TestLine(t *testing.T) {
	for _, tc := range []struct {
		name      string
		version   Version
		firstLine int
		table     []byte
		want      []int // line per instruction index
	}{{
		name: "3.9 lnotab", version: Version{3, 9, 18}, firstLine: 10,
		table: []byte{0, 1, 6, 1, 4, 0xfe}, // +1 at 0, +1 at 6, -2 at 10
		want:  []int{11, 11, 11, 12, 12, 10, 10},
	}, {
		name: "3.9 lnotab long jump", version: Version{3, 9, 18}, firstLine: 1,
		table: []byte{255, 0, 45, 1}, // +1 at byte 300 (index 150)
		want:  append(repeat(1, 150), 2, 2),
	}, {
		name: "3.10 linetable", version: Version{3, 10, 13}, firstLine: 5,
		// [0,4) +1; [4,6) no line; [6,12) +2; [12,12) +1 (empty); [12,14) -1
		table: []byte{4, 1, 2, 0x80, 6, 2, 0, 1, 2, 0xff},
		want:  []int{6, 6, 5, 8, 8, 8, 8, 5},
	}, {
		name: "3.11 location table", version: Version{3, 11, 7}, firstLine: 20,
		table: []byte{
			0xf8,       // none, 1 unit
			0xe9, 0x04, // no columns, +2, 2 units
			0xda, 0x05, 0x09, // one line +1 with columns, 3 units
			0x80, 0x12, // short form (same line), 1 unit
			0xf1, 0x07, 0x00, 0x01, 0x02, // long: -3, end line, columns; 2 units
			0xe8, 0x48, 0x03, // no columns, +100 (two varint groups), 1 unit
		},
		want: []int{20, 22, 22, 23, 23, 23, 23, 20, 20, 120, 20},
	}, {
		name: "3.13 truncated varint and stray bytes", version: Version{3, 13, 0}, firstLine: 7,
		table: []byte{0x05, 0xe9, 0x04, 0x33, 0xe8, 0x48},
		want:  []int{9, 9, 9, 7},
	}, {
		name: "empty table", version: Version{3, 12, 1}, firstLine: 3,
		want: []int{3, 3},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Code{FirstLine: tc.firstLine, format: lineTableFormatOf(tc.version), lineTable: tc.table}
			for i, want := range tc.want {
				require.Equal(t, want, c.Line(uint32(i)), "index %d", i)
			}
		})
	}
}

func repeat(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func TestLinePastTheBytecode(t *testing.T) {
	c := &Code{FirstLine: 10, Instructions: 3, format: formatLnotab, lineTable: []byte{0, 1, 2, 1}}
	require.Equal(t, 12, c.Line(2))
	require.Equal(t, 10, c.Line(3))
	require.Equal(t, 10, c.Line(^uint32(0)))
}

func TestSignedVarint(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{[]byte{0x00}, 0},
		{[]byte{0x04}, 2},
		{[]byte{0x07}, -3},
		{[]byte{0x48, 0x03}, 100},
		{[]byte{0x49, 0x03}, -100},
		{[]byte{0x48}, 0}, // truncated
		{[]byte{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x01}, 0}, // too long
	} {
		require.Equal(t, tc.want, signedVarint(tc.in), "% x", tc.in)
	}
}

// FuzzLineTable: no table, however hostile, makes Line panic or loop.
func FuzzLineTable(f *testing.F) {
	f.Add(uint8(9), uint32(3), []byte{0, 1, 6, 1, 4, 0xfe})
	f.Add(uint8(10), uint32(3), []byte{4, 1, 2, 0x80, 6, 2, 0, 1, 2, 0xff})
	f.Add(uint8(11), uint32(9), []byte{0xf8, 0xe9, 0x04, 0xda, 0x05, 0x09, 0x80, 0x12, 0xf1, 0x07, 0x00, 0x01, 0x02, 0xe8, 0x48, 0x03})
	f.Fuzz(func(t *testing.T, minor uint8, instruction uint32, table []byte) {
		c := &Code{FirstLine: 1, format: lineTableFormatOf(Version{3, int(minor), 0}), lineTable: table}
		c.Line(instruction)
		c.Line(instruction % 64)
	})
}
