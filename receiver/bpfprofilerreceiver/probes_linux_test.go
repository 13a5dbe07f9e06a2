//go:build linux

package bpfprofilerreceiver

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// measuredScope is one call as the workload measured it (CLOCK_MONOTONIC).
type measuredScope struct {
	kind       string
	tid        int
	start, end uint64
}

func readMeasuredScopes(t *testing.T, path string) []measuredScope {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []measuredScope
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m measuredScope
		if n, _ := fmtSscan(sc.Text(), &m); n == 4 {
			out = append(out, m)
		}
	}
	return out
}

// The receiver attaches a probe pair to a process started after it, and
// every outermost main-thread scope of at least 10 ms arrives as one log
// record with the duration the workload measured itself (±1% or 100 µs) and
// timestamps on the shared clock.
func TestProbeLogsOfScopes(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "scopes.c")
	file := "^" + regexp.QuoteMeta(bin) + "$"
	cfg := createDefaultConfig().(*Config)
	cfg.CPU.Enabled = false
	cfg.ReportInterval = 200 * time.Millisecond // records are delivered once per interval
	cfg.Probes = []ProbeConfig{
		{ID: "app.timed", FileMatch: file, Symbol: "timed_scope", MainThreadOnly: true, MinDuration: 10 * time.Millisecond},
		{ID: "app.pair", FileMatch: file, EntrySymbol: "scope_begin", ExitSymbol: "scope_end"},
	}
	require.NoError(t, cfg.Validate())
	sink := new(consumertest.LogsSink)
	rcv, err := NewFactory().CreateLogs(context.Background(), metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	offsets := clockOffsets(t, nil)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })

	out := filepath.Join(t.TempDir(), "measured")
	// Started after the receiver: found through the exec event. Its calls
	// begin 500 ms later, when the probes are attached.
	// SCHED_FIFO keeps other load on the machine out of the scopes' timing.
	work := exec.Command("chrt", "-f", "10", bin, out, "500")
	b, err := testutil.RunWithin(work, testutil.Patient(time.Minute))
	require.NoError(t, err, "%s", b)
	measured := readMeasuredScopes(t, out)

	var wantTimed []measuredScope
	var wantPair int
	for _, m := range measured {
		switch {
		case m.kind == "timed" && m.end-m.start >= uint64(10*time.Millisecond):
			wantTimed = append(wantTimed, m)
		case m.kind == "pair":
			wantPair++
		}
	}
	require.NotEmpty(t, wantTimed)
	require.Eventually(t, func() bool { return sink.LogRecordCount() >= len(wantTimed)+wantPair }, 10*time.Second, 20*time.Millisecond)

	offsets = clockOffsets(t, offsets)
	var timed []plog.LogRecord
	var pair int
	for _, logs := range sink.AllLogs() {
		for i := 0; i < logs.ResourceLogs().Len(); i++ {
			rl := logs.ResourceLogs().At(i)
			pid, _ := rl.Resource().Attributes().Get("process.pid")
			assert.Equal(t, int64(work.Process.Pid), pid.Int())
			lrs := rl.ScopeLogs().At(0).LogRecords()
			for j := 0; j < lrs.Len(); j++ {
				lr := lrs.At(j)
				assert.Equal(t, "bpfprofiler.probe", lr.EventName())
				switch lr.Body().Str() {
				case "app.timed":
					timed = append(timed, lr)
				case "app.pair":
					pair++
				}
			}
		}
	}
	assert.Equal(t, wantPair, pair, "pair scopes")
	require.Len(t, timed, len(wantTimed), "one record per main-thread scope ≥ 10ms")
	for i, lr := range timed {
		m := wantTimed[i]
		attrs := lr.Attributes().AsRaw()
		got := time.Duration(attrs["probe.duration_ns"].(int64))
		want := time.Duration(m.end - m.start)
		assert.InDelta(t, want, got, max(float64(want)/100, float64(100*time.Microsecond)), "scope %d", i)
		assert.Equal(t, true, attrs["probe.main_thread"])
		assert.Equal(t, "timed_scope", attrs["probe.entry_symbol"])
		assert.Equal(t, "timed_scope", attrs["probe.exit_symbol"])
		assert.Equal(t, int64(work.Process.Pid), attrs["thread.id"])
		// On the shared clock the probe's scope lies within the workload's
		// own measurement around the call.
		start := attrs["probe.start_time_unix_nano"].(int64)
		assert.GreaterOrEqual(t, start, int64(m.start)+slices.Min(offsets), "scope %d starts before the call", i)
		assert.LessOrEqual(t, int64(lr.Timestamp()), int64(m.end)+slices.Max(offsets), "scope %d ends after the call returned", i)
		assert.Equal(t, start+int64(got), int64(lr.Timestamp()))
	}
}

func fmtSscan(line string, m *measuredScope) (int, error) {
	if strings.HasPrefix(line, "done") {
		return 0, nil
	}
	return fmtSscanf(line, "%s %d %d %d", &m.kind, &m.tid, &m.start, &m.end)
}

// clockOffsets adds to offsets the wall clock's offset from the monotonic
// one now, measured and as the process caches it (clock.Offset, which
// stamped the records): the wall clock may be slewed (time sync) while the
// test runs, so the records' stamps lie within the offsets seen around
// them.
func clockOffsets(t *testing.T, offsets []int64) []int64 {
	t.Helper()
	measured, err := clock.MeasureOffset()
	require.NoError(t, err)
	cached, err := clock.Offset()
	require.NoError(t, err)
	return append(offsets, measured, cached)
}
