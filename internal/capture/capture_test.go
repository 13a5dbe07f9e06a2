package capture

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStackLoss(t *testing.T) {
	tests := []struct {
		loss         StackLoss
		reason       string
		user, kernel string
	}{
		{StackKept, "", "", ""},
		{StackMapFull, "stack_map_full", "[user stack lost: stack map full]", "[kernel stack lost: stack map full]"},
		{StackHashCollision, "hash_collision", "[user stack lost: hash collision]", "[kernel stack lost: hash collision]"},
		{StackCaptureFailed, "capture_failed", "[user stack lost: capture failed]", "[kernel stack lost: capture failed]"},
		{StackMissing, "missing_at_drain", "[user stack lost: missing at drain]", "[kernel stack lost: missing at drain]"},
	}
	for _, tt := range tests {
		if got := tt.loss.Reason(); got != tt.reason {
			t.Errorf("%d: Reason() = %q, want %q", tt.loss, got, tt.reason)
		}
		if got := tt.loss.Marker(false); got != tt.user {
			t.Errorf("%d: Marker(user) = %q, want %q", tt.loss, got, tt.user)
		}
		if got := tt.loss.Marker(true); got != tt.kernel {
			t.Errorf("%d: Marker(kernel) = %q, want %q", tt.loss, got, tt.kernel)
		}
	}
	if len(AllStackLosses) != int(StackMissing) {
		t.Errorf("AllStackLosses lists %d losses, want every one but StackKept", len(AllStackLosses))
	}
}

// Runtime frame words as the walkers of bpf/apart.h pack them: 48 address
// bits (an arm64 heap address has bit 47 set), 15 of position, whatever
// the runtime walked apart.
func TestRuntimeFramesDecode(t *testing.T) {
	words := []uint64{0x7f00_1234_5678 | 17<<48 | 1<<63, 0x5555_0000_1000 | 0x7fff<<48, 0xffff_a123_4560 | 3<<48}
	for _, rt := range []Runtime{CPython, Ruby, PHP} {
		require.True(t, rt.Apart(), rt.Name())
		got := RuntimeFrames(rt, words)
		require.Equal(t, []Frame{
			{Kind: RuntimeFrame, Runtime: rt, Address: 0x7f00_1234_5678, Position: 17, Entry: true},
			{Kind: RuntimeFrame, Runtime: rt, Address: 0x5555_0000_1000, Position: 0x7fff},
			{Kind: RuntimeFrame, Runtime: rt, Address: 0xffff_a123_4560, Position: 3},
		}, got, rt.Name())
	}
	require.False(t, HotSpot.Apart())
	require.False(t, V8.Apart())
}

// A user word with the top bit set is the walker's runtime frame of the
// native frame before it, in place: HotSpot's Method* (aligned) or V8's
// SharedFunctionInfo (tagged: bit 0 set).
func TestStackFramesWithRuntimeWords(t *testing.T) {
	got := StackFrames([]uint64{0xffffffff81000000}, []uint64{0x7f00_0000_1000, 0x7f00_0000_2000, 0x7e00_0000_0040 | 4<<47 | 1<<63,
		0x5555_0000_0010, 0x3e00_0000_0048 | 7<<47 | 1<<63, 0x5555_0000_0020, 0x3e00_0000_0051 | 1<<63})
	require.Equal(t, []Frame{
		{Kind: KernelFrame, Address: 0xffffffff81000000},
		{Kind: UserFrame, Address: 0x7f00_0000_1000},
		{Kind: UserFrame, Address: 0x7f00_0000_2000},
		{Kind: RuntimeFrame, Runtime: HotSpot, Address: 0x7e00_0000_0040, Position: 4, Entry: true, Native: 0x7f00_0000_2000},
		{Kind: UserFrame, Address: 0x5555_0000_0010},
		{Kind: RuntimeFrame, Runtime: HotSpot, Address: 0x3e00_0000_0048, Position: 7, Entry: true, Native: 0x5555_0000_0010},
		{Kind: UserFrame, Address: 0x5555_0000_0020},
		{Kind: RuntimeFrame, Runtime: V8, Address: 0x3e00_0000_0051, Entry: true, Native: 0x5555_0000_0020},
	}, got)
}

// The in-place words keep 47 address bits and 16 of position on x86-64,
// 48 and 15 on arm64 (whose mmap places objects just below 2^48); a
// 15-bit all-ones position is the unknown one.
func TestInPlaceWordsByArchitecture(t *testing.T) {
	for _, tc := range []struct {
		goarch string
		word   uint64
		want   Frame
	}{
		{"amd64", 1<<63 | 5<<47 | 0x7e00_0000_0040, Frame{Kind: RuntimeFrame, Runtime: HotSpot, Address: 0x7e00_0000_0040, Position: 5, Entry: true}},
		{"amd64", 1<<63 | 0xffff<<47 | 0x7e00_0000_0040, Frame{Kind: RuntimeFrame, Runtime: HotSpot, Address: 0x7e00_0000_0040, Position: InPlacePositionUnknown, Entry: true}},
		{"arm64", 1<<63 | 5<<48 | 0xffff_8000_0040, Frame{Kind: RuntimeFrame, Runtime: HotSpot, Address: 0xffff_8000_0040, Position: 5, Entry: true}},
		{"arm64", 1<<63 | 0x7fff<<48 | 0xffff_8000_0041, Frame{Kind: RuntimeFrame, Runtime: V8, Address: 0xffff_8000_0041, Position: InPlacePositionUnknown, Entry: true}},
	} {
		rt := HotSpot
		if tc.word&1 != 0 {
			rt = V8
		}
		got := runtimeFrames(rt, []uint64{tc.word}, inPlaceAddrBitsOf(tc.goarch))
		require.Equal(t, []Frame{tc.want}, got, "%s %#x", tc.goarch, tc.word)
	}
}

// arm64's x30 word (bits 56-62 set) is a LinkRegisterFrame of its address,
// not a runtime word.
func TestStackFramesWithLinkRegister(t *testing.T) {
	got := StackFrames(nil, []uint64{0xaaaa_0000_1010, 0x7f<<56 | 0xffff_8000_2020, 0xaaaa_0000_3030})
	require.Equal(t, []Frame{
		{Kind: UserFrame, Address: 0xaaaa_0000_1010},
		{Kind: LinkRegisterFrame, Address: 0xffff_8000_2020},
		{Kind: UserFrame, Address: 0xaaaa_0000_3030},
	}, got)
}
