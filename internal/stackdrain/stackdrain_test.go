package stackdrain

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

func TestTrimStack(t *testing.T) {
	tests := []struct {
		name string
		in   []uint64
		want []uint64
	}{
		{name: "nil", in: nil, want: nil},
		{name: "all zero", in: []uint64{0, 0, 0}, want: nil},
		{name: "zero padded", in: []uint64{0x10, 0x20, 0, 0}, want: []uint64{0x10, 0x20}},
		{name: "full", in: []uint64{1, 2, 3}, want: []uint64{1, 2, 3}},
		{name: "stops at first zero", in: []uint64{1, 0, 3}, want: []uint64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := trimStack(tt.in)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("trimStack(%v) = %v, want %v", tt.in, got, tt.want)
			}
			if len(got) > 0 {
				got[0] = 99
				if tt.in[0] == 99 {
					t.Fatal("trimStack must copy, it aliased its input")
				}
			}
		})
	}
}

func TestCommString(t *testing.T) {
	tests := []struct {
		in   []int8
		want string
	}{
		{in: []int8{'b', 'u', 'r', 'n', 0, 'x'}, want: "burn"},
		{in: []int8{0, 'x'}, want: ""},
		{in: []int8{'a', 'b'}, want: "ab"},
	}
	for _, tt := range tests {
		if got := commString(tt.in); got != tt.want {
			t.Errorf("commString(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := commString([]byte("kworker/0:1\x00\x00")); got != "kworker/0:1" {
		t.Errorf("commString(bytes) = %q", got)
	}
}

func TestAssembleSamples(t *testing.T) {
	counts := map[stackKey]uint64{
		{PID: 10, TID: 11, UserStackID: 1, KernelStackID: -1}:    5,
		{PID: 10, TID: 11, UserStackID: 2, KernelStackID: 3}:     7,
		{PID: 10, TID: 12, UserStackID: 9, KernelStackID: -1}:    2, // stack 9 missing
		{PID: 2, TID: 2, UserStackID: -1, KernelStackID: 3}:      1, // kernel thread
		{PID: 3, TID: 3, UserStackID: -14, KernelStackID: 8}:     4, // capture failed, kernel stack missing
		{PID: 3, TID: 5, UserStackID: -7, KernelStackID: -17}:    3, // stack map full, collision
		{PID: 4, TID: 4, UserStackID: 1, KernelStackID: 1}:       0, // zero counts are dropped
		{PID: 20, TID: 20, UserStackID: 9, KernelStackID: 9}:     6, // both missing
		{PID: 21, TID: 21, UserStackID: -22, KernelStackID: -1}:  1, // capture failed (-EINVAL)
		{PID: 22, TID: 22, UserStackID: -28, KernelStackID: -16}: 1, // off-CPU: pending full, busy
	}
	stacks := map[int32][]uint64{
		1: {0x401000, 0x401100},
		2: {0x402000},
		3: {0xffffffff81000000},
	}
	comms := map[uint32]string{11: "burner-1", 2: "kthreadd"}
	kernel := []uint64{0xffffffff81000000}
	want := []capture.RawStack{
		{PID: 2, TID: 2, Comm: "kthreadd", Frames: capture.StackFrames(kernel, nil), Value: 1},
		{PID: 3, TID: 3, Value: 4, UserLoss: capture.StackCaptureFailed, KernelLoss: capture.StackMissing},
		{PID: 3, TID: 5, Value: 3, UserLoss: capture.StackMapFull, KernelLoss: capture.StackHashCollision},
		{PID: 10, TID: 11, Comm: "burner-1", Frames: capture.StackFrames(kernel, []uint64{0x402000}), Value: 7},
		{PID: 10, TID: 11, Comm: "burner-1", Frames: capture.StackFrames(nil, []uint64{0x401000, 0x401100}), Value: 5},
		{PID: 10, TID: 12, Value: 2, UserLoss: capture.StackMissing},
		{PID: 20, TID: 20, Value: 6, UserLoss: capture.StackMissing, KernelLoss: capture.StackMissing},
		{PID: 21, TID: 21, Value: 1, UserLoss: capture.StackCaptureFailed},
		{PID: 22, TID: 22, Value: 1, UserLoss: capture.StackCaptureFailed, KernelLoss: capture.StackCaptureFailed},
	}
	for _, tt := range []struct {
		name                 string
		countsAreSamples     bool
		wantUser, wantKernel uint64
	}{
		{name: "samples", countsAreSamples: true, wantUser: 2 + 6, wantKernel: 4 + 6},
		{name: "weights", countsAreSamples: false, wantUser: 2, wantKernel: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, user, kernel := assembleSamples(counts, stacks, comms, tt.countsAreSamples)
			if user != tt.wantUser || kernel != tt.wantKernel {
				t.Errorf("missing user %d kernel %d, want %d and %d", user, kernel, tt.wantUser, tt.wantKernel)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d samples, want %d: %+v", len(got), len(want), got)
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.PID != w.PID || g.TID != w.TID || g.Comm != w.Comm || g.Value != w.Value ||
					!slices.Equal(g.Frames, w.Frames) ||
					g.UserLoss != w.UserLoss || g.KernelLoss != w.KernelLoss {
					t.Errorf("sample %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// The per-CPU counters land under the reason their BPF index stands for.
func TestCountersAdd(t *testing.T) {
	var st capture.Stats
	counters{Recorded: 10, LostMapFull: 1, UserStackLost: [3]uint64{2, 3, 4}, KernelStackLost: [3]uint64{5, 6, 7}, NewPidDrops: 8}.add(&st)
	counters{Recorded: 1, UserStackLost: [3]uint64{1, 0, 0}}.add(&st)
	want := capture.Stats{Recorded: 11, LostMapFull: 1, NewProcessDrops: 8}
	want.UserStackLost[capture.StackMapFull] = 3
	want.UserStackLost[capture.StackHashCollision] = 3
	want.UserStackLost[capture.StackCaptureFailed] = 4
	want.KernelStackLost[capture.StackMapFull] = 5
	want.KernelStackLost[capture.StackHashCollision] = 6
	want.KernelStackLost[capture.StackCaptureFailed] = 7
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	if got := st.Add(st); got.Recorded != 22 || got.UserStackLost.Total() != 20 || got.NewProcessDrops != 16 {
		t.Errorf("Add: %+v", got)
	}
}

func TestQuiescent(t *testing.T) {
	tests := []struct {
		name        string
		before, now []inflightSeq
		want        bool
	}{
		{name: "idle", before: []inflightSeq{{5, 5}, {7, 7}}, now: []inflightSeq{{6, 5}, {7, 7}}, want: true},
		{name: "still running", before: []inflightSeq{{5, 4}}, now: []inflightSeq{{5, 4}}, want: false},
		{name: "finished", before: []inflightSeq{{5, 4}}, now: []inflightSeq{{5, 5}}, want: true},
		{name: "finished and restarted", before: []inflightSeq{{5, 4}}, now: []inflightSeq{{6, 5}}, want: true},
		{name: "one cpu busy", before: []inflightSeq{{1, 1}, {9, 8}}, now: []inflightSeq{{2, 2}, {9, 8}}, want: false},
		{name: "short read", before: []inflightSeq{{9, 8}}, now: nil, want: false},
	}
	for _, tt := range tests {
		if got := quiescent(tt.before, tt.now); got != tt.want {
			t.Errorf("%s: quiescent = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestMirrorLayouts checks the Go mirrors against the types bpf2go generated
// from bpf/common.h, which both programs use.
func TestMirrorLayouts(t *testing.T) {
	pairs := []struct {
		name      string
		got, want uintptr
	}{
		{"stack_key", unsafe.Sizeof(stackKey{}), unsafe.Sizeof(bpf.CpuStackKey{})},
		{"sampler_config", unsafe.Sizeof(config{}), unsafe.Sizeof(bpf.CpuSamplerConfig{})},
		{"sampler_stats", unsafe.Sizeof(counters{}), unsafe.Sizeof(bpf.CpuSamplerStats{})},
		{"thread_comm", unsafe.Sizeof(threadComm{}), unsafe.Sizeof(bpf.CpuThreadComm{})},
		{"inflight_seq", unsafe.Sizeof(inflightSeq{}), unsafe.Sizeof(bpf.CpuInflightSeq{})},
	}
	for _, p := range pairs {
		if p.got != p.want {
			t.Errorf("%s: Go mirror is %d bytes, generated type %d", p.name, p.got, p.want)
		}
	}
}
