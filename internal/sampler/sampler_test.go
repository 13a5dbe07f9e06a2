package sampler

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-1\n", want: []int{0, 1}},
		{in: "0-3,5,7-8", want: []int{0, 1, 2, 3, 5, 7, 8}},
		{in: "4,0-1,1", want: []int{0, 1, 4}},
		{in: "", wantErr: true},
		{in: "a", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "0,,1", wantErr: true},
		{in: "-1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseCPUList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCPUList(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

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
		{PID: 10, TID: 11, UserStackID: 1, KernelStackID: -1}: 5,
		{PID: 10, TID: 11, UserStackID: 2, KernelStackID: 3}:  7,
		{PID: 10, TID: 12, UserStackID: 9, KernelStackID: -1}: 2, // stack 9 missing
		{PID: 2, TID: 2, UserStackID: -1, KernelStackID: 3}:   1, // kernel thread
		{PID: 3, TID: 3, UserStackID: -14, KernelStackID: 8}:  4, // error id, kernel stack missing
		{PID: 4, TID: 4, UserStackID: 1, KernelStackID: 1}:    0, // zero counts are dropped
	}
	stacks := map[int32][]uint64{
		1: {0x401000, 0x401100},
		2: {0x402000},
		3: {0xffffffff81000000},
	}
	comms := map[uint32]string{11: "burner-1", 2: "kthreadd"}

	got, missing := assembleSamples(counts, stacks, comms)
	want := []RawSample{
		{PID: 2, TID: 2, Comm: "kthreadd", KernelStack: []uint64{0xffffffff81000000}, Count: 1},
		{PID: 3, TID: 3, Count: 4},
		{PID: 10, TID: 11, Comm: "burner-1", UserStack: []uint64{0x402000}, KernelStack: []uint64{0xffffffff81000000}, Count: 7},
		{PID: 10, TID: 11, Comm: "burner-1", UserStack: []uint64{0x401000, 0x401100}, Count: 5},
		{PID: 10, TID: 12, Count: 2},
	}
	if missing != 2+4 {
		t.Errorf("missing = %d, want 6", missing)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d samples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PID != w.PID || g.TID != w.TID || g.Comm != w.Comm || g.Count != w.Count ||
			!slices.Equal(g.UserStack, w.UserStack) || !slices.Equal(g.KernelStack, w.KernelStack) {
			t.Errorf("sample %d = %+v, want %+v", i, g, w)
		}
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

func TestSampleRate(t *testing.T) {
	if err := checkSampleRate(99, 100000); err != nil {
		t.Fatalf("99 Hz rejected: %v", err)
	}
	if err := checkSampleRate(100000, 100000); err != nil {
		t.Fatalf("limit itself rejected: %v", err)
	}
	err := checkSampleRate(200000, 100000)
	if err == nil {
		t.Fatal("200000 > 100000 accepted")
	}
	for _, s := range []string{"200000", "100000", "kernel.perf_event_max_sample_rate", "cpu::samples_per_second"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	for in, want := range map[string]uint64{"100000\n": 100000, " 25000 ": 25000} {
		if got, err := parseSampleRate([]byte(in)); err != nil || got != want {
			t.Errorf("parseSampleRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseSampleRate([]byte("x")); err == nil {
		t.Error("parseSampleRate(x) succeeded")
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "ok", opts: Options{SamplesPerSecond: 19}},
		{name: "zero rate", opts: Options{}, wantErr: "cpu::samples_per_second"},
		{name: "too many targets", opts: Options{SamplesPerSecond: 19, TargetPIDs: make([]uint32, MaxTargets+1)}, wantErr: "capacity"},
	}
	for _, tt := range tests {
		err := tt.opts.validate()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.wantErr)
		}
	}
}
