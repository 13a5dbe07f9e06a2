//go:build linux

package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Probe records reach a logs pipeline (batch processor, debug exporter):
// one record per main-thread scope of at least 10 ms, with its duration.
func TestCollectorProbeLogs(t *testing.T) {
	bin := collectorBinary(t)
	scopes := testutil.BuildC(t, "scopes.c")
	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    cpu: {enabled: false}
    probes:
      - id: app.timed
        file_match: '^%s$'
        symbol: timed_scope
        main_thread_only: true
        min_duration: 10ms
processors:
  batch: {timeout: 200ms}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    logs: {receivers: [bpfprofiler], processors: [batch], exporters: [debug]}
`, regexp.QuoteMeta(scopes)))
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
		30*time.Second, 100*time.Millisecond, "the collector did not attach the probes")

	// Started after the collector: attached through the exec event.
	require.NoError(t, exec.Command(scopes, filepath.Join(t.TempDir(), "measured"), "500").Run())

	// scopes.c's main thread runs timed_scope for 12, 30, 50, 25 and 15 ms
	// (and shorter ones, which min_duration drops).
	durations := regexp.MustCompile(`probe\.duration_ns: Int\((\d+)\)`)
	require.Eventually(t, func() bool { return len(durations.FindAllString(out.String(), -1)) >= 5 },
		30*time.Second, 100*time.Millisecond, "probe records missing from the debug exporter")
	text := out.String()
	assert.Contains(t, text, "Body: Str(app.timed)")
	assert.Contains(t, text, "EventName: bpfprofiler.probe")
	want := []time.Duration{12, 30, 50, 25, 15}
	matches := durations.FindAllStringSubmatch(text, -1)
	require.Len(t, matches, len(want))
	for i, m := range matches {
		ns, _ := strconv.Atoi(m[1])
		got := time.Duration(ns)
		// A sleep of N ms lasts at least N ms; allow scheduling delay.
		assert.GreaterOrEqual(t, got, want[i]*time.Millisecond, "scope %d", i)
		assert.Less(t, got, want[i]*time.Millisecond+5*time.Millisecond, "scope %d", i)
	}
}
