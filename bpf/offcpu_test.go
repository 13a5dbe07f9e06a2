package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
)

// TestOffcpuSpecLayout checks, without loading anything into the kernel, that
// the committed object matches the Go types and the shared drain's
// assumptions (same map names and key/value layouts as the CPU program; the
// stacks are hash maps keyed by content hash instead of stack-trace maps,
// which the drain reads the same way).
func TestOffcpuSpecLayout(t *testing.T) {
	spec, err := LoadOffcpu()
	if err != nil {
		t.Fatal(err)
	}
	const stackDepth = 127
	tests := []struct {
		name      string
		typ       ebpf.MapType
		keySize   uintptr
		valueSize uintptr
	}{
		{OffcpuMapCounts0, ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
		{OffcpuMapCounts1, ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
		{OffcpuMapStacks0, ebpf.Hash, 4, stackDepth * 8},
		{OffcpuMapStacks1, ebpf.Hash, 4, stackDepth * 8},
		{OffcpuMapStarts, ebpf.TaskStorage, 4, unsafe.Sizeof(OffcpuOffcpuStart{})},
		{OffcpuMapPending, ebpf.Hash, 4, unsafe.Sizeof(OffcpuOffcpuPending{})},
		{OffcpuMapZeroPending, ebpf.Array, 4, unsafe.Sizeof(OffcpuOffcpuPending{})},
		{OffcpuMapScratch, ebpf.PerCPUArray, 4, stackDepth * 8},
		{OffcpuMapComms, ebpf.LRUHash, 4, unsafe.Sizeof(CpuThreadComm{})},
		{OffcpuMapConfig, ebpf.Array, 4, unsafe.Sizeof(CpuSamplerConfig{})},
		{OffcpuMapTargetPids, ebpf.Hash, 4, 1},
		{OffcpuMapExcludedPids, ebpf.Hash, 4, 1},
		{OffcpuMapStats, ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuSamplerStats{})},
		{OffcpuMapInflight, ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuInflightSeq{})},
	}
	for _, tt := range tests {
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
	if got := unsafe.Sizeof(OffcpuOffcpuStart{}); got != 16 {
		t.Errorf("offcpu_start is %d bytes, want 16 (explicit padding only)", got)
	}
	if got, want := unsafe.Sizeof(OffcpuOffcpuPending{}), uintptr(8+8+16+2*stackDepth*8); got != want {
		t.Errorf("offcpu_pending is %d bytes, want %d (explicit padding only)", got, want)
	}
	for _, name := range []string{OffcpuProgOffcpuSwitch, OffcpuProgOffcpuFree} {
		p, ok := spec.Programs[name]
		if !ok || p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp {
			t.Errorf("program %s missing or not a tp_btf program: %+v", name, p)
		}
	}
	if _, ok := spec.Variables[OffcpuVarMinBlockNs]; !ok {
		t.Error("variable min_block_ns missing")
	}
}
