package unwinder

import (
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A runtime not ready is asked again quickly in its first seconds (a node
// beside busy programs makes its isolate in a few), then at most a sweep
// apart; no shift overflows however many tries.
func TestRuntimeRetryGap(t *testing.T) {
	since := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		tries  int
		waited time.Duration
		want   time.Duration
	}{
		{1, 150 * time.Millisecond, 200 * time.Millisecond},
		{2, 400 * time.Millisecond, 400 * time.Millisecond},
		{3, time.Second, runtimeQuickGap},
		{12, 9 * time.Second, runtimeQuickGap},
		{13, 11 * time.Second, sweepInterval},
		{1, 11 * time.Second, 200 * time.Millisecond},
		{200, 50 * time.Second, sweepInterval},
	} {
		assert.Equal(t, tt.want, runtimeRetryGap(tt.tries, since, since.Add(tt.waited)), "%+v", tt)
	}
}

// A runtime's id is one in the kernel, capture and internal/runtimes:
// each value of bpf/runtimes.h's enum runtime_id but RUNTIME_NONE is
// RUNTIME_<the capture.Runtime of that id>, whose Name is the runtime's of
// that ID; every runtime has one of them.
func TestRuntimeIDsAgree(t *testing.T) {
	spec, err := bpf.LoadCpu()
	require.NoError(t, err)
	var enum *btf.Enum
	require.NoError(t, spec.Types.TypeByName("runtime_id", &enum))
	names := map[string]string{"cpython": "CPYTHON", "jvm": "HOTSPOT", "v8js": "V8", "ruby": "RUBY", "php": "PHP"}
	ids := map[uint8]string{}
	for _, v := range enum.Values {
		if v.Value != 0 {
			ids[uint8(v.Value)] = v.Name
		}
	}
	for _, rt := range all.Runtimes {
		assert.Equal(t, rt.Name, capture.Runtime(rt.ID).Name(), "%s: ID %d", rt.Name, rt.ID)
		assert.Equal(t, "RUNTIME_"+names[rt.Name], ids[rt.ID], "%s: ID %d", rt.Name, rt.ID)
		delete(ids, rt.ID)
	}
	assert.Empty(t, ids, "ids of no runtime")
}

// Every executable mapping of a process running node carries V8's in-place
// id, anonymous JIT code and files alike; a process running no in-place
// runtime (a CPython's is walked apart) carries none.
func TestLoaderTagsInPlaceRuntime(t *testing.T) {
	node := testutil.StartChild(t, exec.Command(testutil.Node(t, 20), "-e",
		`for (let i = 0; i < 1e6; i++) new Function("return " + i)(); console.log("ready"); setInterval(() => {}, 1000)`))
	node.Line(t, testutil.Patient(time.Minute))
	py := testutil.StartChild(t, exec.Command(testutil.Interpreters(t)[0].Path, "-c", "import time; print('ready', flush=True); time.sleep(600)"))
	py.Line(t, testutil.Patient(time.Minute))

	tm := newTestMaps(t, maxTables)
	l := NewLoader(tm, procfs.FS{Root: "/proc"}, 1<<20)
	for _, c := range []*testutil.Child{node, py} {
		require.NoError(t, l.Load(uint32(c.Pid())))
	}
	runtimeOf := map[uint32]map[uint32]int{} // pid -> runtime id -> entries
	anon := 0
	var key bpf.CpuUnwindMappingKey
	var value bpf.CpuUnwindMapping
	for it := tm.Mappings.Iterate(); it.Next(&key, &value); {
		if runtimeOf[key.Pid] == nil {
			runtimeOf[key.Pid] = map[uint32]int{}
		}
		runtimeOf[key.Pid][value.Runtime]++
		if key.Pid == uint32(node.Pid()) && value.Table == anonTable {
			anon++
		}
	}
	v8 := uint32(bpf.CpuRuntimeIdRUNTIME_V8)
	assert.Len(t, runtimeOf[uint32(node.Pid())], 1, "node's entries: %v", runtimeOf[uint32(node.Pid())])
	assert.NotZero(t, runtimeOf[uint32(node.Pid())][v8], "node's entries: %v", runtimeOf[uint32(node.Pid())])
	assert.NotZero(t, anon, "node's JIT code")
	assert.Equal(t, []uint32{0}, slices.Collect(maps.Keys(runtimeOf[uint32(py.Pid())])), "python's entries")
}
