package php

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFrameWords encodes frames as the BPF walker does and decodes them.
func TestFrameWords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		frame   WalkedFrame
		word    uint64
		decoded WalkedFrame // when not frame
	}{
		{"user", WalkedFrame{Function: 0x7f12_3456_7890, Position: 5}, 0x0005_7f12_3456_7890, WalkedFrame{}},
		{"entry", WalkedFrame{Function: 0x5555_0000_1000, Position: 0, Entry: true}, 1<<63 | 0x5555_0000_1000, WalkedFrame{}},
		{"no position", WalkedFrame{Function: 0x1000, Position: NoPosition}, 0x7fff<<48 | 0x1000, WalkedFrame{}},
		{"last position", WalkedFrame{Function: 0x1000, Position: 0x7ffe}, 0x7ffe<<48 | 0x1000, WalkedFrame{}},
		{"clamped", WalkedFrame{Function: 0x1000, Position: 70000}, 0x7ffe<<48 | 0x1000, WalkedFrame{Function: 0x1000, Position: 0x7ffe}},
		{"48 bits", WalkedFrame{Function: 0xffff_8000_0000_1000, Position: 1}, 1<<48 | 0x8000_0000_1000, WalkedFrame{Function: 0x8000_0000_1000, Position: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.word, tc.frame.Word())
			want := tc.decoded
			if want == (WalkedFrame{}) {
				want = tc.frame
			}
			require.Equal(t, want, FrameOfWord(tc.word))
		})
	}
}
