package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A `symbol:` probe on a Go method, as a user writes it, times each call
// per goroutine in Go executables started after the collector: the oldest
// supported Go release static and stripped, the newest with cgo. The
// goscopes workload's HTTP handler calls the method, which sleeps, blocks
// on a channel (most calls resume on another thread) and panics on every
// 50th request: one log record per call that returned, each as long as
// the call the handler measured around it, less at most scopeTolerance,
// each with its call's goroutine label (request), where the kernel has
// attach cookies (5.15).
func TestCollectorGoProbeLogs(t *testing.T) {
	bin := collectorBinary(t)
	var workloads []string
	for _, b := range testutil.GoProbeBuilds {
		workloads = append(workloads, testutil.BuildGoWith(t, "goscopes", b))
	}
	out := startCollector(t, bin, `
receivers:
  bpfprofiler:
    cpu: {enabled: false}
    probes:
      - id: go.checkout
        file_match: '/goscopes(-[^/]*)?$'
        symbol: main.(*server).checkout
processors:
  batch: {timeout: 200ms}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    logs: {receivers: [bpfprofiler], processors: [batch], exporters: [debug]}
`)
	waitReady(t, out)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
		30*time.Second, 100*time.Millisecond, "the collector did not attach the probes")

	const requests, clients = 200, 8
	var calls []time.Duration
	for _, w := range workloads {
		measured := filepath.Join(t.TempDir(), "measured")
		cmd := exec.Command(w, measured, fmt.Sprint(requests), fmt.Sprint(clients))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		c := testutil.StartChild(t, cmd)
		require.Equal(t, "READY", c.Line(t, testutil.Patient(time.Minute)))
		// Attached through the exec event: give it the time an emulated
		// kernel of the kernel matrix needs.
		time.Sleep(testutil.Patient(3 * time.Second))
		_, err = io.WriteString(stdin, "go\n")
		require.NoError(t, err)
		require.Equal(t, "DONE", c.Line(t, testutil.Patient(2*time.Minute)), filepath.Base(w))
		require.NoError(t, c.Wait(t, testutil.Patient(time.Minute)))
		got := workloadCalls(t, measured, "checkout")
		require.Len(t, got, requests-requests/50, filepath.Base(w))
		calls = append(calls, got...)
	}

	durations := regexp.MustCompile(`probe\.duration_ns: Int\((\d+)\)`)
	require.Eventually(t, func() bool { return len(durations.FindAllString(out.String(), -1)) >= len(calls) },
		testutil.Patient(30*time.Second), 100*time.Millisecond, "probe records missing from the debug exporter")
	time.Sleep(500 * time.Millisecond) // any extra record
	got := probeDurations(durations, out.String())
	require.Len(t, got, len(calls), "one record per call that returned")
	// Calls run concurrently: sorted, the k-th shortest record is at most
	// the k-th shortest call, and, for all but a few, not shorter by more
	// than the tolerance: the Go scheduler may run other goroutines between
	// the handler's clock read and the call (seen: 5.6 ms once in 392 calls
	// on an emulated one-CPU guest, eight clients beside the server).
	slices.Sort(got)
	slices.Sort(calls)
	var worst time.Duration
	near := 0
	for i := range got {
		require.LessOrEqual(t, got[i], calls[i], "record %d of %d", i, len(got))
		if calls[i]-got[i] <= scopeTolerance(calls[i]) {
			near++
		}
		worst = max(worst, calls[i]-got[i])
	}
	require.GreaterOrEqual(t, 100*near, 98*len(got), "records within the tolerance of their calls")
	require.Contains(t, out.String(), "Body: Str(go.checkout)")
	labelled := len(regexp.MustCompile(`-> request: Str\(\d+\)`).FindAllString(out.String(), -1))
	wantLabelled := len(got)
	if features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) != nil {
		wantLabelled = 0 // the labels' file is in the attach cookie
	}
	require.Equal(t, wantLabelled, labelled, "records with their call's request label")
	matrixFigure(t, "%d records, %d within %v of their calls, at most %.2f ms short, %d request labels", len(got), near,
		scopeTolerance(0), float64(worst)/1e6, labelled)
}

// workloadCalls returns the durations of the kind lines ("kind tid start
// end") a workload wrote to path.
func workloadCalls(t *testing.T, path, kind string) []time.Duration {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		var k string
		var tid, start, end uint64
		if n, _ := fmt.Sscan(line, &k, &tid, &start, &end); n == 4 && k == kind {
			out = append(out, time.Duration(end-start))
		}
	}
	return out
}
