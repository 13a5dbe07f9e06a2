package hotspot

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
	assert.True(t, lineTableEnds(table, 0))
	assert.False(t, lineTableEnds(table[:3], 0), "no end byte yet")
	withX := []byte{0xff, 1, 21, 2<<3 | 1, 0}
	assert.Equal(t, int64(11), lineAt(withX, 2, 1))
}
