package hotspot

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBlobAt(t *testing.T) {
	l := &Layout{BlockHeaderSize: 16}
	// Segments of 64 bytes at 0x1000; the map at 0x100: a block of three
	// segments, a free one, a block of 300 segments (two hops back).
	segmap := []byte{0, 1, 2, 0xff, 0}
	for i := 1; i < 300; i++ {
		segmap = append(segmap, byte(min(i, 254)))
	}
	mem := &fakeMem{base: 0x100, b: segmap}
	h := CodeHeap{Low: 0x1000, High: 0x1000 + uint64(len(segmap))*64, Segmap: 0x100, Log2Segment: 6}
	for _, tt := range []struct {
		pc   uint64
		want uint64
		err  string
	}{
		{pc: 0x1000, want: 0x1010},
		{pc: 0x1000 + 2*64 + 5, want: 0x1010},
		{pc: 0x1000 + 3*64, err: "in no block"},
		{pc: 0x1000 + 4*64 + 299*64, want: 0x1000 + 4*64 + 16},
		{pc: 0x800, err: "not in heap"},
	} {
		got, err := BlobAt(mem, l, h, tt.pc)
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, "pc %#x", tt.pc)
			continue
		}
		require.NoError(t, err, "pc %#x", tt.pc)
		assert.Equal(t, tt.want, got, "pc %#x", tt.pc)
	}

	// A hostile map: leading before the heap, and a cycle of hops.
	_, err := BlobAt(&fakeMem{base: 0x100, b: []byte{5}}, l, CodeHeap{Low: 0x1000, High: 0x1040, Segmap: 0x100, Log2Segment: 6}, 0x1000)
	assert.ErrorContains(t, err, "before the heap")
	loop := make([]byte, 200)
	for i := range loop {
		loop[i] = 1 // never 0: every hop goes back one segment
	}
	_, err = BlobAt(&fakeMem{base: 0x100, b: loop}, l, CodeHeap{Low: 0x1000, High: 0x1000 + 200*64, Segmap: 0x100, Log2Segment: 6}, 0x1000+199*64)
	assert.ErrorContains(t, err, "hops")
}
