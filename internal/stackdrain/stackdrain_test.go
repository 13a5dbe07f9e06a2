package stackdrain

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

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
		{Pid: 10, Tid: 11, UserStackId: 1, KernelStackId: -1}:    5,
		{Pid: 10, Tid: 11, UserStackId: 2, KernelStackId: 3}:     7,
		{Pid: 10, Tid: 12, UserStackId: 9, KernelStackId: -1}:    2, // stack 9 missing
		{Pid: 2, Tid: 2, UserStackId: -1, KernelStackId: 3}:      1, // kernel thread
		{Pid: 3, Tid: 3, UserStackId: -14, KernelStackId: 8}:     4, // capture failed, kernel stack missing
		{Pid: 3, Tid: 5, UserStackId: -7, KernelStackId: -17}:    3, // stack map full, collision
		{Pid: 4, Tid: 4, UserStackId: 1, KernelStackId: 1}:       0, // zero counts are dropped
		{Pid: 20, Tid: 20, UserStackId: 9, KernelStackId: 9}:     6, // both missing
		{Pid: 21, Tid: 21, UserStackId: -22, KernelStackId: -1}:  1, // capture failed (-EINVAL)
		{Pid: 22, Tid: 22, UserStackId: -28, KernelStackId: -16}: 1, // off-CPU: pending full, busy
		// inside a scope of probe 1 (ScopeProbe is the index + 1)
		{Pid: 10, Tid: 11, UserStackId: 1, KernelStackId: -1, ScopeProbe: 2, ScopeStartNs: 500}: 3,
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
		{PID: 10, TID: 11, Comm: "burner-1", Frames: capture.StackFrames(nil, []uint64{0x401000, 0x401100}), Value: 3,
			Scope: &capture.ScopeRef{ProbeIndex: 1, Start: 500}},
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
					g.UserLoss != w.UserLoss || g.KernelLoss != w.KernelLoss ||
					(g.Scope == nil) != (w.Scope == nil) || (g.Scope != nil && *g.Scope != *w.Scope) {
					t.Errorf("sample %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// The per-CPU counters land under the reason their BPF index stands for.
func TestCountersAdd(t *testing.T) {
	var st capture.Stats
	addCounters(&st, counters{Recorded: 10, LostMapFull: 1, UserStackLost: [3]uint64{2, 3, 4}, KernelStackLost: [3]uint64{5, 6, 7}, NewPidDrops: 8})
	addCounters(&st, counters{Recorded: 1, UserStackLost: [3]uint64{1, 0, 0}, UnwindEnds: [6]uint64{4, 1, 0, 0, 0, 2}, UnwindFrames: 70})
	want := capture.Stats{Recorded: 11, LostMapFull: 1, NewProcessDrops: 8, UnwindFrames: 70}
	want.UnwindEnds[capture.UnwindRoot] = 4
	want.UnwindEnds[capture.UnwindNoMapping] = 1
	want.UnwindEnds[capture.UnwindBadFrame] = 2
	want.UserStackLost[capture.StackMapFull] = 3
	want.UserStackLost[capture.StackHashCollision] = 3
	want.UserStackLost[capture.StackCaptureFailed] = 4
	want.KernelStackLost[capture.StackMapFull] = 5
	want.KernelStackLost[capture.StackHashCollision] = 6
	want.KernelStackLost[capture.StackCaptureFailed] = 7
	if !reflect.DeepEqual(st, want) {
		t.Errorf("got %+v, want %+v", st, want)
	}
	if got := st.Add(st); got.Recorded != 22 || got.UserStackLost.Total() != 20 || got.NewProcessDrops != 16 ||
		got.UnwindEnds[capture.UnwindRoot] != 8 || got.UnwindFrames != 140 {
		t.Errorf("Add: %+v", got)
	}
}

// Each runtime's row of the walks apart lands in that runtime's counters
// only, summed over CPUs.
func TestCountersAddRuntimeRows(t *testing.T) {
	tests := []struct {
		runtime capture.Runtime
		got     func(capture.Stats) capture.RuntimeWalks
	}{
		{capture.CPython, func(st capture.Stats) capture.RuntimeWalks {
			return capture.RuntimeWalks{Ends: st.PythonEnds, Frames: st.PythonFrames, StackLost: st.PythonStackLost}
		}},
		{capture.Ruby, func(st capture.Stats) capture.RuntimeWalks { return st.RubyWalks }},
		{capture.PHP, func(st capture.Stats) capture.RuntimeWalks { return st.PHPWalks }},
	}
	for _, tt := range tests {
		t.Run(tt.runtime.Name(), func(t *testing.T) {
			var c counters
			c.RuntimeEnds[tt.runtime] = [4]uint64{5, 1, 2, 3}
			c.RuntimeFrames[tt.runtime] = 70
			c.RuntimeStackLost[tt.runtime] = 4
			var st capture.Stats
			addCounters(&st, c)
			addCounters(&st, c)
			want := capture.RuntimeWalks{Frames: 140, StackLost: 8}
			want.Ends[capture.RuntimeRoot] = 10
			want.Ends[capture.RuntimeNoThread] = 2
			want.Ends[capture.RuntimeReadFault] = 4
			want.Ends[capture.RuntimeDepth] = 6
			if got := tt.got(st); got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
			// Nothing of this row lands in another runtime's counters.
			for _, other := range tests {
				if other.runtime != tt.runtime {
					if got := other.got(st); got != (capture.RuntimeWalks{}) {
						t.Errorf("%s's counters: %+v", other.runtime.Name(), got)
					}
				}
			}
		})
	}
}

func TestQuiescent(t *testing.T) {
	tests := []struct {
		name        string
		before, now []inflightSeq
		want        bool
	}{
		{name: "idle", before: []inflightSeq{{Enter: 5, Exit: 5}, {Enter: 7, Exit: 7}}, now: []inflightSeq{{Enter: 6, Exit: 5}, {Enter: 7, Exit: 7}}, want: true},
		{name: "still running", before: []inflightSeq{{Enter: 5, Exit: 4}}, now: []inflightSeq{{Enter: 5, Exit: 4}}, want: false},
		{name: "finished", before: []inflightSeq{{Enter: 5, Exit: 4}}, now: []inflightSeq{{Enter: 5, Exit: 5}}, want: true},
		{name: "finished and restarted", before: []inflightSeq{{Enter: 5, Exit: 4}}, now: []inflightSeq{{Enter: 6, Exit: 5}}, want: true},
		{name: "one cpu busy", before: []inflightSeq{{Enter: 1, Exit: 1}, {Enter: 9, Exit: 8}}, now: []inflightSeq{{Enter: 2, Exit: 2}, {Enter: 9, Exit: 8}}, want: false},
		{name: "short read", before: []inflightSeq{{Enter: 9, Exit: 8}}, now: nil, want: false},
	}
	for _, tt := range tests {
		if got := quiescent(tt.before, tt.now); got != tt.want {
			t.Errorf("%s: quiescent = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDecodeProcessEvent(t *testing.T) {
	for _, tc := range []struct {
		entry uint32
		want  capture.ProcessEvent
	}{
		{entry: 4242, want: capture.ProcessEvent{PID: 4242}},
		{entry: 4242 | 0x80000000, want: capture.ProcessEvent{PID: 4242, Exec: true}},
		{entry: 4242 | 0x40000000, want: capture.ProcessEvent{PID: 4242, Exit: true}},
		{entry: 4242 | 0x20000000, want: capture.ProcessEvent{PID: 4242, Rescan: true}},
		{entry: 1<<22 - 1 | 0x20000000, want: capture.ProcessEvent{PID: 1<<22 - 1, Rescan: true}},
	} {
		if got := decodeProcessEvent(tc.entry); got != tc.want {
			t.Errorf("entry %#x: got %+v, want %+v", tc.entry, got, tc.want)
		}
	}
}

// pack stores attribute bytes as bpf/threadctx.h does, with garbage
// words after them as a reused per-CPU buffer leaves.
func pack(b []byte) []uint64 {
	const mark = 1 << 63
	words := []uint64{mark | uint64(len(b))}
	for i := 0; i < len(b); i += 8 {
		var w uint64
		for j := 0; j < 8 && i+j < len(b); j++ {
			w |= uint64(b[i+j]) << (8 * j)
		}
		words = append(words, w)
	}
	return append(words, 0xdeadbeef, 0)
}

func TestUnpackAttrs(t *testing.T) {
	long := make([]byte, 616)
	for i := range long {
		long[i] = byte(i) // zero bytes too
	}
	tests := []struct {
		name  string
		words []uint64
		want  []byte
	}{
		{"one entry", pack([]byte("\x00\x09/checkout")), []byte("\x00\x09/checkout")},
		{"eight bytes exactly", pack([]byte("\x01\x06GET/ab")), []byte("\x01\x06GET/ab")},
		{"a zero word inside", pack(make([]byte, 20)), make([]byte, 20)},
		{"the most BPF keeps", pack(long), long},
		{"no mark", []uint64{3, 1}, nil},
		{"a count beyond the words", []uint64{1<<63 | 17, 1, 2}, nil},
		{"a count the words hold", []uint64{1<<63 | 16, 0x0807060504030201, 0}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UnpackAttrs(tt.words); !bytes.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("UnpackAttrs = %q, want %q", got, tt.want)
			}
		})
	}
}
