//go:build linux

package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// USDT probes through the collector: a running program's semaphores are
// set while the collector runs and 0 again once it stopped; one record per
// scope, in the executable and in the library it loaded, named by its
// USDT probes; the executable's with work:start's arguments as the
// attributes key names them.
func TestCollectorUSDTProbes(t *testing.T) {
	bin := collectorBinary(t)
	w := testutil.StartSDTPair(t)
	f, err := elf.Open(w.Bin)
	require.NoError(t, err)
	probes, err := usdt.Probes(f)
	f.Close()
	require.NoError(t, err)
	var start, done uint64 // the semaphores' addresses
	for _, p := range probes {
		switch p.FullName() {
		case "work:start":
			start = p.Semaphore
		case "work:done":
			done = p.Semaphore
		}
	}
	require.NotZero(t, start)
	require.NotZero(t, done)
	semaphores := func() [2]uint16 { return [2]uint16{w.Semaphore(t, start), w.Semaphore(t, done)} }
	require.Equal(t, [2]uint16{0, 0}, semaphores(), "before the collector")

	cfgPath := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
receivers:
  bpfprofiler:
    cpu: {enabled: false}
    probes:
      - id: work
        file_match: '^%s$'
        usdt_entry: work:start
        usdt_exit: work:done
        attributes: {ms: arg0, weight: arg1, answer: arg2, work.name: str(arg3)}
      - id: lib
        file_match: '^%s$'
        usdt_entry: sdtlib:start
        usdt_exit: sdtlib:done
processors:
  batch: {timeout: 200ms}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    logs: {receivers: [bpfprofiler], processors: [batch], exporters: [debug]}
`, regexp.QuoteMeta(w.Bin), regexp.QuoteMeta(w.Lib))), 0o600))
	out, stop := runStoppableCollector(t, exec.Command(bin, "--config", cfgPath))
	waitReady(t, out)
	require.Contains(t, out.String(), "probes attached")
	sems := semaphores()
	require.Equal(t, [2]uint16{1, 2}, sems, "while attached: one uprobe per site")

	for _, s := range w.Round(t)[:3] {
		require.True(t, s.Enabled, "work:start's semaphore set while attached")
	}
	entries := regexp.MustCompile(`probe\.usdt_entry: Str\(([a-z]+:start)\)`)
	require.Eventually(t, func() bool { return len(entries.FindAllString(out.String(), -1)) >= 6 },
		testutil.Patient(30*time.Second), 100*time.Millisecond, "probe records missing from the debug exporter")
	time.Sleep(500 * time.Millisecond) // let any unexpected extra record arrive
	text := out.String()
	require.Len(t, entries.FindAllString(text, -1), 6)
	require.Equal(t, 3, strings.Count(text, "probe.usdt_entry: Str(work:start)"))
	require.Equal(t, 3, strings.Count(text, "probe.usdt_exit: Str(sdtlib:done)"))
	require.NotContains(t, text, "probe.entry_symbol")
	for _, ms := range []int{10, 20, 30} {
		require.Equal(t, 1, strings.Count(text, fmt.Sprintf("-> ms: Int(%d)\n", ms)), "ms %d", ms)
		require.Equal(t, 1, strings.Count(text, fmt.Sprintf("-> weight: Int(%d)\n", -3*ms)), "weight of ms %d", ms)
		require.Equal(t, 1, strings.Count(text, fmt.Sprintf("-> work.name: Str(work-%d)\n", ms)), "work.name of ms %d", ms)
	}
	require.Equal(t, 3, strings.Count(text, "-> answer: Int(42)\n"))
	durations := probeDurations(regexp.MustCompile(`probe\.duration_ns: Int\((\d+)\)`), text)
	require.Len(t, durations, 6)

	require.NoError(t, stop())
	require.Equal(t, [2]uint16{0, 0}, semaphores(), "after the collector stopped")
	for _, s := range w.Round(t)[:3] {
		require.False(t, s.Enabled, "work:start's semaphore set after the collector stopped")
	}
	matrixFigure(t, "semaphores %d/%d while attached, 0/0 after; durations %v", sems[0], sems[1], durations)
}
