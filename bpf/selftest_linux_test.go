//go:build linux

package bpf

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestStackStoreHelpers runs the stack store and count helpers in the kernel
// (BPF_PROG_TEST_RUN). Before Linux 6.4 helpers return int, so an errno kept
// in a 64-bit variable never equals -EEXIST: every stack stored a second time
// was then dropped as an error. This test fails on such a kernel if a helper
// result is compared as a long again.
func TestStackStoreHelpers(t *testing.T) {
	testutil.RequireBPF(t)
	_ = memlock.Raise() // BPF memory counts against RLIMIT_MEMLOCK before 5.11
	var objs SelftestObjects
	if err := LoadSelftestObjects(&objs, nil); err != nil {
		t.Fatalf("load selftest program: %v", err)
	}
	defer objs.Close()

	const depth = 127
	frames := make([]uint64, depth)
	other := make([]uint64, depth)
	for i := range 8 {
		frames[i] = 0xffffffff81000000 + uint64(i)*0x40
		other[i] = 0x400000 + uint64(i)*0x10
	}
	if err := objs.TestFrames.Put(uint32(0), frames); err != nil {
		t.Fatal(err)
	}
	if err := objs.TestFrames.Put(uint32(1), other); err != nil {
		t.Fatal(err)
	}
	// The one-entry map is full before the run: storing other must fail.
	if err := objs.TestFull.Put(uint32(7), frames); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.RunSelftest.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
		t.Fatalf("run selftest program: %v", err)
	}
	var res SelftestSelftestResult
	if err := objs.TestResult.Lookup(uint32(0), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("result: %+v", res)
	const e2big = -7
	switch {
	case res.FirstId < 0:
		t.Errorf("first store failed: %d", res.FirstId)
	case res.SecondId != res.FirstId:
		t.Errorf("the same frames stored again got id %d, want %d (an -EEXIST not recognized?)", res.SecondId, res.FirstId)
	}
	if res.OtherId < 0 || res.OtherId == res.FirstId {
		t.Errorf("other frames got id %d (first %d)", res.OtherId, res.FirstId)
	}
	if res.FullId != e2big {
		t.Errorf("store into a full map returned %d, want -E2BIG (%d)", res.FullId, e2big)
	}
	if res.AddFirst != 0 || res.AddSecond != 0 || res.Count != 12 {
		t.Errorf("add_delta: first %d, second %d, total %d; want 0, 0, 12", res.AddFirst, res.AddSecond, res.Count)
	}
	// One loss under each reason (map full, collision, capture failed);
	// -1 and a stored id are no loss.
	if res.Lost != [3]uint64{1, 1, 1} {
		t.Errorf("count_stack_loss counted %v by enum stack_loss, want [1 1 1]", res.Lost)
	}
	t.Logf("matrix: id %d twice, full map %d, count %d", res.SecondId, res.FullId, res.Count)
	stored := make([]uint64, depth)
	if err := objs.TestStacks.Lookup(uint32(res.FirstId), &stored); err != nil {
		t.Fatalf("stored frames: %v", err)
	}
	for i := range frames {
		if stored[i] != frames[i] {
			t.Fatalf("stored frame %d is %#x, want %#x", i, stored[i], frames[i])
		}
	}
}
