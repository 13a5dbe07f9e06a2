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

// The runtimes' InPlace ids are bpf/runtimes.h's: each value of enum
// inplace_runtime but INPLACE_NONE is the id of the runtime whose walker
// its dispatch enters, and no runtime has an id the dispatch lacks.
func TestInPlaceIDsAreTheDispatch(t *testing.T) {
	spec, err := bpf.LoadCpu()
	require.NoError(t, err)
	var enum *btf.Enum
	require.NoError(t, spec.Types.TypeByName("inplace_runtime", &enum))
	walkers := map[string]string{"INPLACE_HOTSPOT": "jvm", "INPLACE_V8": "v8js"}
	ids := map[uint32]string{}
	for _, v := range enum.Values {
		if v.Value == 0 {
			continue
		}
		name, ok := walkers[v.Name]
		require.True(t, ok, "%s: which runtime's walker?", v.Name)
		ids[uint32(v.Value)] = name
	}
	for _, rt := range all.Runtimes {
		if rt.InPlace != 0 {
			assert.Equal(t, ids[rt.InPlace], rt.Name, "InPlace %d", rt.InPlace)
			delete(ids, rt.InPlace)
		}
	}
	assert.Empty(t, ids, "dispatch entries of no runtime")
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
	v8 := uint32(bpf.CpuInplaceRuntimeINPLACE_V8)
	assert.Len(t, runtimeOf[uint32(node.Pid())], 1, "node's entries: %v", runtimeOf[uint32(node.Pid())])
	assert.NotZero(t, runtimeOf[uint32(node.Pid())][v8], "node's entries: %v", runtimeOf[uint32(node.Pid())])
	assert.NotZero(t, anon, "node's JIT code")
	assert.Equal(t, []uint32{0}, slices.Collect(maps.Keys(runtimeOf[uint32(py.Pid())])), "python's entries")
}
