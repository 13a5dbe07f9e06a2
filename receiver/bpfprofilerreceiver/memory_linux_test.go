//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// TestGoHeapProfiles: with memory::go on (and CPU profiling off), a Go
// program allocating 3 bytes in allocBig for each in allocSmall gets the
// four heap profiles, named as runtime/pprof names them, with a period of
// space in bytes: alloc_space splits 75 ± 5 between the two, and their
// stacks start at the allocating function, not in the runtime's allocator.
func TestGoHeapProfiles(t *testing.T) {
	testutil.RequireBPF(t)
	bin := filepath.Join(t.TempDir(), "goalloc")
	require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goalloc"), bin, runtime.GOARCH, testutil.GoBuild{}))
	child := testutil.StartChild(t, exec.Command(bin, "-duration", "30s", "-per-second", "500"))
	defer func() { _ = child.Kill(10 * time.Second) }()

	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = time.Second
	cfg.CPU.Enabled = false
	cfg.Memory.Go = true
	cfg.Targets.PIDs = []uint32{uint32(child.Pid())}
	sink := new(consumertest.ProfilesSink)
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	time.Sleep(6 * time.Second) // the measurement window, not a wait for a condition
	require.NoError(t, rcv.Shutdown(context.Background()))

	all := sink.AllProfiles()
	alloc, leaves := map[string]int64{}, map[string]int64{}
	types := map[string]bool{}
	for _, pd := range all {
		validate(t, pd)
		for _, typ := range []string{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"} {
			if pdata.Total(pdata.OfType(pd, typ)) > 0 {
				types[typ] = true
			}
		}
		for fn, v := range pdata.FunctionTotals(pdata.OfType(pd, "alloc_space")) {
			alloc[fn] += v
		}
		for fn, v := range pdata.LeafTotals(pdata.OfType(pd, "alloc_space")) {
			leaves[fn] += v
		}
	}
	require.Len(t, types, 4, "sample types seen: %v", types)
	big, small := alloc["main.allocBig"], alloc["main.allocSmall"]
	require.Positive(t, big+small, "functions: %v", alloc)
	share := float64(big) / float64(big+small)
	t.Logf("alloc_space main.allocBig %d main.allocSmall %d (%.3f); leaves %v", big, small, share, leaves)
	require.InDelta(t, 0.75, share, 0.05)
	require.GreaterOrEqual(t, leaves["main.allocBig"]+leaves["main.allocSmall"], (big+small)*99/100,
		"stacks start at the allocating function: leaves %v", leaves)
}

// TestUSDTHeapProfiles: with memory::usdt on (and CPU profiling off), a C
// program whose allocator fires otel_memory:alloc and otel_memory:free,
// allocating 3 bytes in alloc_big for each in alloc_small, gets the four
// heap profiles: alloc_space splits 75 ± 5 between the two (symbolized),
// and both have live objects.
func TestUSDTHeapProfiles(t *testing.T) {
	testutil.RequireBPF(t)
	bin := filepath.Join(t.TempDir(), "otelmem")
	require.NoError(t, testutil.CompileC(testutil.Workload(t, filepath.Join("usdt", "otelmem.c")), bin, "-O2"))
	child := testutil.StartChild(t, exec.Command(bin, "30"))
	defer func() { _ = child.Kill(10 * time.Second) }()

	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = time.Second
	cfg.CPU.Enabled = false
	cfg.Memory.USDT, cfg.Memory.USDTInterval = true, 4096
	cfg.Targets.PIDs = []uint32{uint32(child.Pid())}
	sink := new(consumertest.ProfilesSink)
	rcv, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(),
		metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	time.Sleep(5 * time.Second) // the measurement window, not a wait for a condition
	require.NoError(t, rcv.Shutdown(context.Background()))

	alloc, inuse := map[string]int64{}, map[string]int64{}
	types := map[string]bool{}
	for _, pd := range sink.AllProfiles() {
		validate(t, pd)
		for _, typ := range []string{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"} {
			if pdata.Total(pdata.OfType(pd, typ)) > 0 {
				types[typ] = true
			}
		}
		for fn, v := range pdata.FunctionTotals(pdata.OfType(pd, "alloc_space")) {
			alloc[fn] += v
		}
		for fn, v := range pdata.FunctionTotals(pdata.OfType(pd, "inuse_space")) {
			inuse[fn] += v
		}
	}
	require.Len(t, types, 4, "sample types seen: %v", types)
	big, small := alloc["alloc_big"], alloc["alloc_small"]
	require.Positive(t, big+small, "functions: %v", alloc)
	share := float64(big) / float64(big+small)
	t.Logf("alloc_space alloc_big %d alloc_small %d (%.3f); inuse_space %d %d", big, small, share, inuse["alloc_big"], inuse["alloc_small"])
	require.InDelta(t, 0.75, share, 0.05)
	require.Positive(t, inuse["alloc_big"])
	require.Positive(t, inuse["alloc_small"])
}
