package unwinder

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBlocksCoverTheRangeExactly(t *testing.T) {
	for _, tt := range []struct {
		start, end uint64
		want       int // number of blocks, 0: not checked
	}{
		{0x1000, 0x2000, 1},
		{0x7f0000001000, 0x7f0000005000, 3}, // 0x1000, 0x2000..0x4000, 0x4000
		{0x400000, 0x4a1000, 0},
		{0x7fff12345000, 0x7fff12399000, 0},
		{0, 0x1000, 1},
		{0xfffffffffffff000, 0xffffffffffffffff, 0},
	} {
		bs := blocks(tt.start, tt.end)
		if tt.want != 0 {
			assert.Len(t, bs, tt.want, "%#x-%#x", tt.start, tt.end)
		}
		next := tt.start
		for _, b := range bs {
			require.Equal(t, next, b.addr, "%#x-%#x: blocks are contiguous", tt.start, tt.end)
			require.Zero(t, b.addr&(uint64(1)<<b.bits-1), "block %#x/%d is aligned", b.addr, b.bits)
			next = b.addr + uint64(1)<<b.bits
		}
		assert.Equal(t, tt.end, next, "%#x-%#x: covered to the end", tt.start, tt.end)
		assert.LessOrEqual(t, len(bs), 2*64)
	}
}

func TestPrefixLen(t *testing.T) {
	assert.Equal(t, uint32(96-12), block{bits: 12}.prefixLen())
}

func TestLoadBias(t *testing.T) {
	progs := []elf.ProgHeader{
		{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0, Filesz: 0x1000},
		{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1000, Vaddr: 0x1000, Filesz: 0x5000},
		{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x6123, Vaddr: 0x207123, Filesz: 0x100},
	}
	for _, tt := range []struct {
		name          string
		start, offset uint64
		want          uint64
		wantErr       bool
	}{
		{"PIE text", 0x7f0000001000, 0x1000, 0x7f0000000000, false},
		{"segment not at its page start", 0x600000, 0x6000, 0x600000 - 0x6000 + 0x6123 - 0x207123, false},
		{"non-executable offset", 0x7f0000000000, 0x9000, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadBias(progs, tt.start, tt.offset)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
