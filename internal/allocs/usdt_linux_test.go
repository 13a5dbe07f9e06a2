//go:build linux

package allocs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// otelmemInterval is the sampling interval of TestUSDTAllocations: about
// two samples of otelmem's four allocations of a round (1056 bytes on
// average).
const otelmemInterval = 512

// TestUSDTAllocations profiles otelmem (testdata/workloads/usdt), started
// after the Manager, for 5 s after 3 s of warm-up (its rings turn over in
// under 2 s): alloc_big allocates 3 bytes for each of alloc_small's, so
// 75 ± 5% of the alloc_space of the two is alloc_big's; the inuse_space
// of each is within 10% of the bytes its ring holds, as the program
// prints them; the sampled allocations of a round are as many as the
// BPF side's exponential countdown gives (within 5%), and each
// function's alloc_objects is its calls (within 10%).
func TestUSDTAllocations(t *testing.T) {
	testutil.RequireBPF(t)
	if !haveAttachCookies() {
		t.Skip("otel_memory probes need attach cookies (Linux 5.15)")
	}
	bin := filepath.Join(t.TempDir(), "otelmem")
	require.NoError(t, testutil.CompileC(testutil.Workload(t, filepath.Join("usdt", "otelmem.c")), bin, "-O2"))
	m, err := Open(Options{Proc: procfs.FS{}, Logger: zaptest.NewLogger(t), USDT: true, USDTInterval: otelmemInterval,
		RescanInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	defer m.Close()

	child := testutil.StartChild(t, exec.Command(bin, "15"))
	require.Eventually(t, func() bool { return m.Stats().USDTFiles > 0 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(3 * time.Second)
	m.Drain() // warm-up: ring objects allocated before the probes
	st0 := m.Stats()
	first := liveLine(t, child)
	time.Sleep(5 * time.Second)
	w := m.Drain()
	st := m.Stats()
	last := liveLine(t, child)
	t.Logf("stats %+v", st)

	fns := cFunctionRanges(t, bin, child.Pid())
	pid := uint32(child.Pid())
	alloc := sumBy(t, w.AllocSpace, pid, fns, false)
	objects := sumBy(t, w.AllocObjects, pid, fns, false)
	inuse := sumBy(t, w.InuseSpace, pid, fns, false)
	share := float64(alloc["big"]) / float64(alloc["big"]+alloc["small"])
	rounds := last["rounds"] - first["rounds"]
	t.Logf("alloc_space big %d small %d (%.3f big); alloc_objects big %d small %d of %d calls each; inuse_space big %d small %d; live: %v",
		alloc["big"], alloc["small"], share, objects["big"], objects["small"], rounds, inuse["big"], inuse["small"], last)
	require.InDelta(t, 0.75, share, 0.05, "alloc_space split")
	for _, fn := range []string{"big", "small"} {
		require.InEpsilon(t, float64(last[fn]), float64(inuse[fn]), 0.10, "inuse_space of %s against its ring's bytes", fn)
		require.InEpsilon(t, float64(rounds), float64(objects[fn]), 0.10, "alloc_objects of %s against its calls", fn)
	}
	want := float64(rounds) * otelmemSamplesPerRound()
	require.InEpsilon(t, want, float64(st.Mallocs-st0.Mallocs), 0.05, "sampled allocations in %d rounds", rounds)
	require.NotZero(t, st.Frees, "frees of sampled objects")
	require.Zero(t, st.UnmatchedFrees, "usdt_free sends only frees of live sampled objects")
	require.Zero(t, st.RingbufFull)
	require.Zero(t, st.USDTArgsLost)
	require.Zero(t, st.Refused)
}

// Without attach cookies (before Linux 5.15) the otel_memory probes are
// refused with one warning; the Go programs still load.
func TestUSDTWithoutCookies(t *testing.T) {
	testutil.RequireBPF(t)
	saved := haveAttachCookies
	haveAttachCookies = func() bool { return false }
	defer func() { haveAttachCookies = saved }()
	bin := filepath.Join(t.TempDir(), "otelmem")
	require.NoError(t, testutil.CompileC(testutil.Workload(t, filepath.Join("usdt", "otelmem.c")), bin, "-O2"))
	core, logs := observer.New(zap.WarnLevel)
	m, err := Open(Options{Proc: procfs.FS{}, Logger: zap.New(core), Go: true, USDT: true, RescanInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer m.Close()
	require.NotNil(t, m.objs.GoMallocP1)
	require.Nil(t, m.objs.UsdtAlloc)

	child := testutil.StartChild(t, exec.Command(bin, "2"))
	liveLine(t, child)
	time.Sleep(200 * time.Millisecond) // rescans
	require.Zero(t, m.Stats().USDTFiles)
	require.Equal(t, 1, logs.FilterMessageSnippet("attach cookies").Len(), "%v", logs.All())
}

// otelmemSamplesPerRound is how many of a round's allocations of otelmem
// are sampled on average: sizes s and 3s, s uniform in 16..512, each
// sampled with probability 1 - exp(-size/interval).
func otelmemSamplesPerRound() float64 {
	var sum float64
	for s := uint64(16); s <= 512; s++ {
		for _, size := range []uint64{s, 3 * s} {
			o, _ := ScaleWeighted(size, size, otelmemInterval)
			sum += 1 / o // the probability
		}
	}
	return sum / 497
}

// liveLine returns the numbers of otelmem's next "live" line.
func liveLine(t *testing.T, child *testutil.Child) map[string]int64 {
	t.Helper()
	child.Pending()
	line := child.Until(t, 5*time.Second, func(l string) bool { return strings.HasPrefix(l, "live ") })
	return parseLine(t, "live ", line[len(line)-1:])
}

// cFunctionRanges returns where alloc_big and alloc_small of the C
// executable bin are in process pid.
func cFunctionRanges(t *testing.T, bin string, pid int) map[string]addrRange {
	t.Helper()
	f, err := os.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	ef, err := elf.NewFile(f)
	require.NoError(t, err)
	maps, err := procfs.FS{}.ExecMaps(uint32(pid))
	require.NoError(t, err)
	var bias uint64
	found := false
	for _, mp := range maps {
		if mp.Path == bin {
			var progs []elf.ProgHeader
			for _, p := range ef.Progs {
				progs = append(progs, p.ProgHeader)
			}
			bias, found = Bias(progs, mp.Start, mp.Offset)
			break
		}
	}
	require.True(t, found, "%s not mapped executable", bin)
	funcs, err := symbolize.FindFunctions(f, func(n string) bool { return n == "alloc_big" || n == "alloc_small" })
	require.NoError(t, err)
	out := map[string]addrRange{}
	for _, s := range funcs.Symbols {
		out[strings.TrimPrefix(s.Name, "alloc_")] = addrRange{s.Value + bias, s.Value + s.Size + bias}
	}
	require.Len(t, out, 2)
	return out
}

// handle reads events as bpf/alloc.bpf.c lays them out (the generated
// struct, encoded): a USDT malloc is scaled by its weight and live at
// once, its free releases it, and events of processes not targeted are
// dropped.
func TestHandleUSDTEvents(t *testing.T) {
	m := &Manager{tracker: NewTracker(0), targets: map[uint32]bool{7: true}}
	event := func(kind, pid uint32, addr uint64) []byte {
		ev := bpf.AllocAllocEvent{Kind: kind, Pid: pid, Tid: pid, Frames: 2, Addr: addr, Size: 64, Rate: 1024, Weight: 512}
		ev.Ips[0], ev.Ips[1] = 0x1000, 0x2000
		var b bytes.Buffer
		require.NoError(t, binary.Write(&b, binary.LittleEndian, &ev))
		return b.Bytes()
	}
	m.handle(event(eventKindUSDT, 7, 0x10))
	m.handle(event(eventKindUSDT, 7, 0x20))
	m.handle(event(eventKindUSDT, 8, 0x30)) // not a target
	m.handle(event(eventKindUFree, 7, 0x20))
	w := m.tracker.Drain()
	p := 1 - math.Exp(-0.5)
	require.Len(t, w.AllocSpace, 1)
	require.Equal(t, uint64(math.Round(2*512/p)), w.AllocSpace[0].Value)
	require.Equal(t, uint64(math.Round(2*8/p)), w.AllocObjects[0].Value)
	require.Len(t, w.InuseSpace, 1)
	require.Equal(t, uint64(math.Round(512/p)), w.InuseSpace[0].Value)
	require.Equal(t, []uint64{0x1000, 0x2000}, []uint64{w.InuseSpace[0].Frames[0].Address, w.InuseSpace[0].Frames[1].Address})
	require.Equal(t, uint64(1), m.tracker.Frees)
}
