package offcpu

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "zero", opts: Options{}},
		{name: "1ms", opts: Options{MinBlock: time.Millisecond, TargetPIDs: []uint32{1}, ExcludePIDs: []uint32{2}}},
		{name: "negative min_block", opts: Options{MinBlock: -1}, wantErr: "off_cpu::min_block"},
		{name: "too many targets", opts: Options{TargetPIDs: make([]uint32, MaxTargets+1)}, wantErr: "capacity"},
		{name: "too many excluded", opts: Options{ExcludePIDs: make([]uint32, MaxExcluded+1)}, wantErr: "excluded"},
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

func TestPinnedIDs(t *testing.T) {
	starts := []start{
		{Generation: 0, UserStackID: 5, KernelStackID: 6},
		{Generation: 0, UserStackID: -1, KernelStackID: 6},  // kernel thread
		{Generation: 0, UserStackID: -14, KernelStackID: 0}, // stack error, id 0 is valid
		{Generation: 1, UserStackID: 7, KernelStackID: 8},
	}
	tests := []struct {
		gen  uint32
		want []uint32
	}{
		{gen: 0, want: []uint32{0, 5, 6}},
		{gen: 1, want: []uint32{7, 8}},
	}
	for _, tt := range tests {
		got := slices.Sorted(maps.Keys(pinnedIDs(starts, tt.gen)))
		if !slices.Equal(got, tt.want) {
			t.Errorf("gen %d: pinned %v, want %v", tt.gen, got, tt.want)
		}
	}
	if got := pinnedIDs(nil, 0); len(got) != 0 {
		t.Errorf("no starts: pinned %v", got)
	}
}

func TestStartLayout(t *testing.T) {
	if got, want := unsafe.Sizeof(start{}), unsafe.Sizeof(bpf.OffcpuOffcpuStart{}); got != want {
		t.Errorf("start mirror is %d bytes, generated offcpu_start %d", got, want)
	}
	g := bpf.OffcpuOffcpuStart{}
	if unsafe.Offsetof(start{}.Generation) != unsafe.Offsetof(g.Generation) ||
		unsafe.Offsetof(start{}.UserStackID) != unsafe.Offsetof(g.UserStackId) ||
		unsafe.Offsetof(start{}.KernelStackID) != unsafe.Offsetof(g.KernelStackId) {
		t.Error("start mirror field offsets differ from offcpu_start")
	}
}
