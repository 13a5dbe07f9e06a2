package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
)

// TestCpuSpecLayout checks, without loading anything into the kernel, that the
// committed object matches the Go types and the sampler's assumptions.
func TestCpuSpecLayout(t *testing.T) {
	spec, err := LoadCpu()
	if err != nil {
		t.Fatal(err)
	}
	checkMaps(t, spec, []mapLayout{
		{CpuMapCounts0, ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
		{CpuMapCounts1, ebpf.Hash, unsafe.Sizeof(CpuStackKey{}), 8},
		{CpuMapStacks0, ebpf.Hash, 4, stackDepth * 8},
		{CpuMapStacks1, ebpf.Hash, 4, stackDepth * 8},
		{CpuMapScratch, ebpf.PerCPUArray, 4, stackDepth * 8},
		{CpuMapSeenPids, ebpf.LRUHash, 4, 1},
		{CpuMapNewPids, ebpf.RingBuf, 0, 0},
		{CpuMapComms, ebpf.LRUHash, 4, unsafe.Sizeof(CpuThreadComm{})},
		{CpuMapConfig, ebpf.Array, 4, unsafe.Sizeof(CpuSamplerConfig{})},
		{CpuMapTargetPids, ebpf.Hash, 4, 1},
		{CpuMapStats, ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuSamplerStats{})},
		{CpuMapInflight, ebpf.PerCPUArray, 4, unsafe.Sizeof(CpuInflightSeq{})},
		{CpuMapPythonProcs, ebpf.Hash, 4, unsafe.Sizeof(CpuPythonProc{})},
		{CpuMapOpenScopes, ebpf.LRUHash, 4, unsafe.Sizeof(CpuOpenScope{})},
		{CpuMapContextProcs, ebpf.Hash, 4, unsafe.Sizeof(CpuContextProc{})},
		{CpuMapContextPids, ebpf.Array, 4, 8},
	})
	if m := spec.Maps[CpuMapContextPids]; m != nil && m.MaxEntries != 1<<22/64 {
		t.Errorf("context_pids has %d words, want PID_MAX_LIMIT's %d", m.MaxEntries, 1<<22/64)
	}
	if got := unsafe.Sizeof(CpuPythonProc{}); got != 64 {
		t.Errorf("python_proc is %d bytes, want 64 (explicit padding only)", got)
	}
	if got := unsafe.Sizeof(CpuStackKey{}); got != 72 {
		t.Errorf("stack_key is %d bytes, want 72 (explicit padding only)", got)
	}
	if got := unsafe.Sizeof(CpuThreadCtxProc{}); got != 16 {
		t.Errorf("thread_ctx_proc is %d bytes, want 16", got)
	}
	if got := unsafe.Sizeof(CpuContextProc{}); got != 16+56+8 {
		t.Errorf("context_proc is %d bytes, want 80 (thread_ctx_proc, go_labels_proc, sources)", got)
	}
	// recorded, lost_map_full, user and kernel stack losses by reason
	// (NR_STACK_LOSSES each), new_pid_drops, unwind ends by reason
	// (NR_UNWIND_ENDS), unwind_frames, per runtime walked apart
	// (NR_RUNTIMES) its walks' ends by reason (NR_RUNTIME_ENDS), frames
	// and stacks lost, thread context
	// and Go label reads by outcome (NR_THREAD_CTX), the attributes
	// truncated and lost, the Go labels truncated and lost:
	// internal/stackdrain mirrors it.
	const runtimes = 6
	if got, want := unsafe.Sizeof(CpuSamplerStats{}), uintptr(2+2*3+1+6+1+runtimes*(4+1+1)+7+1+1+1+1)*8; got != want {
		t.Errorf("sampler_stats is %d bytes, want %d", got, want)
	}
	if got, want := unsafe.Sizeof(OffcpuSamplerStats{}), unsafe.Sizeof(CpuSamplerStats{}); got != want {
		t.Errorf("off-CPU sampler_stats is %d bytes, CPU %d: the drain reads both the same way", got, want)
	}
	if m := spec.Maps[CpuMapNewPids]; m != nil && m.MaxEntries != 16*1024 {
		t.Errorf("new_pids is %d bytes, want 16 KiB", m.MaxEntries)
	}
	p, ok := spec.Programs[CpuProgSampleCpu]
	if !ok || p.Type != ebpf.PerfEvent {
		t.Fatalf("program %s missing or not a perf_event program: %+v", CpuProgSampleCpu, p)
	}
	p, ok = spec.Programs[CpuProgForgetProcess]
	if !ok || p.Type != ebpf.Tracing || p.AttachType != ebpf.AttachTraceRawTp || p.AttachTo != "sched_process_exit" {
		t.Errorf("program %s missing or not a tp_btf/sched_process_exit program: %+v", CpuProgForgetProcess, p)
	}
}
