//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// A USDT probe pair in an executable and one in a library it loaded: one
// log record per scope, named by its USDT probes, not by symbols; the
// executable's carry work:start's arguments as the attributes name them
// (an integer in a register, one in memory, a constant, a string).
func TestProbeLogsOfUSDTScopes(t *testing.T) {
	testutil.RequireBPF(t)
	w := testutil.StartSDTPair(t)

	cfg := createDefaultConfig().(*Config)
	cfg.CPU.Enabled = false
	cfg.ReportInterval = 200 * time.Millisecond
	cfg.Probes = []ProbeConfig{
		{ID: "work", FileMatch: "^" + regexp.QuoteMeta(w.Bin) + "$", USDTEntry: "work:start", USDTExit: "work:done",
			Attributes: map[string]string{"ms": "arg0", "weight": "arg1", "answer": "arg2", "work.name": "str(arg3)"}},
		{ID: "lib", FileMatch: "^" + regexp.QuoteMeta(w.Lib) + "$", USDTEntry: "sdtlib:start", USDTExit: "sdtlib:done"},
	}
	require.NoError(t, cfg.Validate())
	sink := new(consumertest.LogsSink)
	rcv, err := NewFactory().CreateLogs(context.Background(), metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })

	// Start attaches to the running process before it returns.
	for _, s := range w.Round(t)[:3] {
		require.True(t, s.Enabled, "work:start's semaphore set while attached")
	}
	require.Eventually(t, func() bool { return sink.LogRecordCount() >= 6 }, testutil.Patient(5*time.Second), 20*time.Millisecond)
	time.Sleep(2 * cfg.ReportInterval) // let any unexpected extra record arrive
	require.Equal(t, 6, sink.LogRecordCount(), "three scopes of each probe")

	seen := map[int64]int{} // work's records by ms
	names := map[string][2]string{"work": {"work:start", "work:done"}, "lib": {"sdtlib:start", "sdtlib:done"}}
	for _, logs := range sink.AllLogs() {
		for i := 0; i < logs.ResourceLogs().Len(); i++ {
			lrs := logs.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
			for j := 0; j < lrs.Len(); j++ {
				attrs := lrs.At(j).Attributes().AsRaw()
				want := names[lrs.At(j).Body().Str()]
				assert.Equal(t, want[0], attrs["probe.usdt_entry"])
				assert.Equal(t, want[1], attrs["probe.usdt_exit"])
				assert.NotContains(t, attrs, "probe.entry_symbol")
				assert.GreaterOrEqual(t, attrs["probe.duration_ns"], int64(10*time.Millisecond))
				if lrs.At(j).Body().Str() != "work" {
					assert.NotContains(t, attrs, "ms")
					continue
				}
				ms, _ := attrs["ms"].(int64)
				seen[ms]++
				assert.Equal(t, -3*ms, attrs["weight"])
				assert.Equal(t, int64(42), attrs["answer"])
				assert.Equal(t, fmt.Sprintf("work-%d", ms), attrs["work.name"])
			}
		}
	}
	assert.Equal(t, map[int64]int{10: 1, 20: 1, 30: 1}, seen, "work's records by their ms attribute")
}
