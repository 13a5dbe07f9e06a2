package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
)

// mapLayout is the expected type and key/value sizes of one map.
type mapLayout struct {
	name      string
	typ       ebpf.MapType
	keySize   uintptr
	valueSize uintptr
}

const stackDepth = 127

// sharedOffcpuMaps are the maps both off-CPU programs have (bpf/offcpu.h):
// the drained maps with the same names and layouts as the CPU program's, and
// the announcements.
var sharedOffcpuMaps = []mapLayout{
	{"counts_0", ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
	{"counts_1", ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
	{"stacks_0", ebpf.Hash, 4, stackDepth * 8},
	{"stacks_1", ebpf.Hash, 4, stackDepth * 8},
	{"scratch", ebpf.PerCPUArray, 4, stackDepth * 8},
	{"comms", ebpf.LRUHash, 4, unsafe.Sizeof(CpuThreadComm{})},
	{"config", ebpf.Array, 4, unsafe.Sizeof(CpuSamplerConfig{})},
	{"target_pids", ebpf.Hash, 4, 1},
	{"excluded_pids", ebpf.Hash, 4, 1},
	{"stats", ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuSamplerStats{})},
	{"inflight", ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuInflightSeq{})},
	{"seen_pids", ebpf.LRUHash, 4, 1},
	{"new_pids", ebpf.RingBuf, 0, 0},
}

// TestOffcpuSpecLayout checks, without loading anything into the kernel, that
// the committed objects of both off-CPU mechanisms match the Go types and
// the shared drain's assumptions.
func TestOffcpuSpecLayout(t *testing.T) {
	taskWork, err := LoadOffcpu()
	if err != nil {
		t.Fatal(err)
	}
	switchOut, err := LoadOffcpuSwitchout()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		spec *ebpf.CollectionSpec
		own  []mapLayout
	}{
		{"task_work", taskWork, []mapLayout{
			{OffcpuMapStarts, ebpf.TaskStorage, 4, unsafe.Sizeof(OffcpuOffcpuStart{})},
			{OffcpuMapPending, ebpf.Hash, 4, unsafe.Sizeof(OffcpuOffcpuPending{})},
			{OffcpuMapZeroPending, ebpf.Array, 4, unsafe.Sizeof(OffcpuOffcpuPending{})},
		}},
		{"switch_out", switchOut, []mapLayout{
			{OffcpuSwitchoutMapSleeps, ebpf.Hash, 4, unsafe.Sizeof(OffcpuSwitchoutOffcpuSleep{})},
			{OffcpuSwitchoutMapUserStacks, ebpf.LRUHash, 4, stackDepth * 8},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkMaps(t, tt.spec, append(append([]mapLayout{}, sharedOffcpuMaps...), tt.own...))
			for _, name := range []string{"offcpu_switch", "offcpu_free", "forget_process", "forget_exec"} {
				p, ok := tt.spec.Programs[name]
				if !ok || p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp {
					t.Errorf("program %s missing or not a tp_btf program: %+v", name, p)
				}
			}
			if _, ok := tt.spec.Variables["min_block_ns"]; !ok {
				t.Error("variable min_block_ns missing")
			}
		})
	}
	if got := unsafe.Sizeof(OffcpuOffcpuStart{}); got != 16 {
		t.Errorf("offcpu_start is %d bytes, want 16 (explicit padding only)", got)
	}
	if got, want := unsafe.Sizeof(OffcpuOffcpuPending{}), uintptr(8+8+16+2*stackDepth*8); got != want {
		t.Errorf("offcpu_pending is %d bytes, want %d (explicit padding only)", got, want)
	}
	// 32 bytes, and the thread context read at switch-out (threadctx.h:
	// ids, the attributes' and Go labels' ids, outcome, 4 flags, padding,
	// the goroutine).
	if got := unsafe.Sizeof(OffcpuSwitchoutOffcpuSleep{}); got != 32+64 {
		t.Errorf("offcpu_sleep is %d bytes, want 96 (explicit padding only)", got)
	}
}

func checkMaps(t *testing.T, spec *ebpf.CollectionSpec, want []mapLayout) {
	t.Helper()
	for _, tt := range want {
		m, ok := spec.Maps[tt.name]
		if !ok {
			t.Errorf("map %s missing", tt.name)
			continue
		}
		if m.Type != tt.typ || uintptr(m.KeySize) != tt.keySize || uintptr(m.ValueSize) != tt.valueSize {
			t.Errorf("map %s: type %v key %d value %d, want %v key %d value %d",
				tt.name, m.Type, m.KeySize, m.ValueSize, tt.typ, tt.keySize, tt.valueSize)
		}
	}
}
