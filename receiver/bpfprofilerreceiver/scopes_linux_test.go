//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// scopeRun is what one receiver with profiles and logs pipelines emitted
// while a workload ran.
type scopeRun struct {
	pid      int
	profiles []pprofile.Profiles
	records  map[pdata.ScopeLink]plog.LogRecord // by trace and span id
}

// runWithScopes starts one receiver in a profiles and a logs pipeline with
// cfg, runs the workload, and returns what came out once it shut down.
func runWithScopes(t *testing.T, cfg *Config, workload string, args ...string) scopeRun {
	t.Helper()
	require.NoError(t, cfg.Validate())
	profs, logs := new(consumertest.ProfilesSink), new(consumertest.LogsSink)
	set := metadatatest.NewSettings(componenttest.NewTelemetry())
	f := NewFactory()
	pr, err := f.(xreceiver.Factory).CreateProfiles(context.Background(), set, cfg, profs)
	require.NoError(t, err)
	lr, err := f.CreateLogs(context.Background(), set, cfg, logs)
	require.NoError(t, err)
	require.NoError(t, pr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, lr.Start(context.Background(), componenttest.NewNopHost()))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			require.NoError(t, lr.Shutdown(context.Background()))
			require.NoError(t, pr.Shutdown(context.Background()))
		}
	}
	t.Cleanup(stop)

	child := testutil.StartWorkloadChild(t, workload, args...)
	require.NoError(t, child.Wait(t, testutil.Patient(2*time.Minute)))
	time.Sleep(cfg.ReportInterval) // the last samples reach a report
	stop()

	run := scopeRun{pid: child.Pid(), profiles: profs.AllProfiles(), records: map[pdata.ScopeLink]plog.LogRecord{}}
	for _, l := range logs.AllLogs() {
		for _, rl := range l.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, rec := range sl.LogRecords().All() {
					run.records[pdata.ScopeLink{TraceID: rec.TraceID(), SpanID: rec.SpanID()}] = rec
				}
			}
		}
	}
	return run
}

// stacks returns the workload's stacks of sample type typ, over every report.
func (r scopeRun) stacks(typ string) []pdata.NamedStack {
	var out []pdata.NamedStack
	for _, p := range r.profiles {
		out = append(out, pdata.Stacks(pdata.OfPID(pdata.OfType(p, typ), r.pid))...)
	}
	return out
}

// The scopelink workload's slow scopes (50 ms: 45 ms burning in slow_path,
// 5 ms asleep) make records, its fast ones (1 ms) do not (min_duration 20
// ms). CPU and off-CPU samples taken inside the slow scopes link to their
// records; no sample of a fast scope is linked. The probe_duration profile
// of the entry stacks splits 3:1 between the two callers.
func TestSamplesLinkedToScopes(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "scopelink.c")
	cfg := createDefaultConfig().(*Config)
	cfg.CPU.SamplesPerSecond = 199
	cfg.OffCPU.Enabled = true
	cfg.OffCPU.MinBlock = time.Millisecond
	cfg.ReportInterval = time.Second
	cfg.Probes = []ProbeConfig{{
		ID: "app.handle", FileMatch: "^" + regexp.QuoteMeta(bin) + "$", Symbol: "handle",
		MinDuration: 20 * time.Millisecond, Stacks: true,
	}}
	// 20 cycles of 8 calls: 80 slow scopes, about 4.1 s; the calls start
	// after the probes attached (exec event).
	run := runWithScopes(t, cfg, bin, "20", "500")
	require.NotEmpty(t, run.records)
	require.LessOrEqual(t, len(run.records), 80)
	require.GreaterOrEqual(t, len(run.records), 76, "slow scopes with a record")

	for _, typ := range []string{"samples", "off_cpu"} {
		var linked, linkedSlow, slow, fastLinked int64
		spans := map[pdata.ScopeLink]bool{}
		for _, s := range run.stacks(typ) {
			inSlow := slices.Contains(s.Functions, "slow_path")
			if inSlow {
				slow += s.Value
			}
			if s.Link == (pdata.ScopeLink{}) {
				require.Empty(t, s.ProbeID, "%s: an unlinked sample has no probe.id", typ)
				continue
			}
			_, ok := run.records[s.Link]
			require.True(t, ok, "%s: a linked sample's trace and span id %v are those of a log record", typ, s.Link)
			require.Equal(t, "app.handle", s.ProbeID)
			spans[s.Link] = true
			linked += s.Value
			if inSlow {
				linkedSlow += s.Value
			}
			if slices.Contains(s.Functions, "fast_path") {
				fastLinked += s.Value
			}
		}
		t.Logf("%s: linked %d (in slow_path %d) of %d in slow_path, to %d of %d scopes; fast_path linked %d",
			typ, linked, linkedSlow, slow, len(spans), len(run.records), fastLinked)
		require.Positive(t, linked, typ)
		require.Zero(t, fastLinked, "%s: samples of dropped scopes are not linked", typ)
		require.GreaterOrEqual(t, float64(linkedSlow), 0.95*float64(linked), "%s: linked samples are in slow_path", typ)
		require.GreaterOrEqual(t, float64(linkedSlow), 0.90*float64(slow), "%s: slow_path samples are linked", typ)
	}

	// Entry stacks weighted by duration: handle ← caller_a 3, ← caller_b 1.
	var callers = map[string]int64{}
	var total int64
	for _, s := range run.stacks("probe_duration") {
		require.Equal(t, "app.handle", s.ProbeID)
		require.NotEmpty(t, s.Functions)
		require.Equal(t, "handle", s.Functions[0], "the entry stack starts at the probed function")
		total += s.Value
		for _, c := range []string{"caller_a", "caller_b"} {
			if slices.Contains(s.Functions, c) {
				callers[c] += s.Value
			}
		}
	}
	var recorded int64
	for _, rec := range run.records {
		recorded += durationOf(rec)
	}
	t.Logf("probe_duration: total %v over %d records (%v), caller_a %v, caller_b %v",
		time.Duration(total), len(run.records), time.Duration(recorded), time.Duration(callers["caller_a"]), time.Duration(callers["caller_b"]))
	require.Equal(t, recorded, total, "every record's duration, once")
	share := float64(callers["caller_a"]) / float64(total)
	require.InDelta(t, 0.75, share, 0.05, "caller_a's share of the scopes' duration")
	require.Equal(t, total, callers["caller_a"]+callers["caller_b"], "every entry stack reaches its caller")
}

// durationOf is a probe record's probe.duration_ns.
func durationOf(rec plog.LogRecord) int64 {
	v, ok := rec.Attributes().Get("probe.duration_ns")
	if !ok || v.Type() != pcommon.ValueTypeInt {
		return 0
	}
	return v.Int()
}

// Every 4th callback burns 300 ms in slowCallback, the others 5 ms in
// fastCallback; each runs from its own timer, so in its own callback scope.
// Each burns in its own body: under unwinding::method auto a walk stops at
// the first JIT frame (JIT code is in no mapping the unwind tables know), so
// a helper's callers would not be seen.
const linkedNodeScript = `
let n = 0, x = 0;
const total = 24;
function next() {
  if (++n >= total) return setTimeout(() => {}, 1500); // stay for a report
  setTimeout(n % 4 === 3 ? slowCallback : fastCallback, 20);
}
function slowCallback() {
  const end = performance.now() + 300;
  let y = x; // a local double: no allocation, so no garbage collection inside
  while (performance.now() < end) { y += Math.sqrt(y + 1); }
  x = y;
  next();
}
function fastCallback() {
  const end = performance.now() + 5;
  let y = x; // a local double: no allocation, so no garbage collection inside
  while (performance.now() < end) { y += Math.sqrt(y + 1); }
  x = y;
  next();
}
setTimeout(fastCallback, 3000); // the probes attach after the exec event, and node's tables load (later on a loaded host): leave them time
`

// node's InternalCallbackScope probe (main thread, at least 100 ms) on node
// started with no flag: the CPU samples linked to its records are those of
// the slow callbacks, named by the V8 walker.
func TestNodeCallbackSamplesLinked(t *testing.T) {
	testutil.RequireBPF(t)
	const node = "/usr/bin/node"
	if _, err := os.Stat(node); err != nil {
		testutil.SkipOrFail(t, "no %s: %v", node, err)
	}
	script := filepath.Join(t.TempDir(), "callbacks.js")
	require.NoError(t, os.WriteFile(script, []byte(linkedNodeScript), 0o644))
	cfg := createDefaultConfig().(*Config)
	cfg.CPU.SamplesPerSecond = 199
	cfg.ReportInterval = time.Second
	cfg.Probes = []ProbeConfig{{
		ID:             "node.callback_scope",
		FileMatch:      "/node$",
		EntrySymbol:    "node::InternalCallbackScope::InternalCallbackScope(...)",
		ExitSymbol:     "node::InternalCallbackScope::~InternalCallbackScope()",
		MainThreadOnly: true,
		MinDuration:    100 * time.Millisecond,
	}}
	run := runWithScopes(t, cfg, node, script)
	require.Len(t, run.records, 6, "one record per slow callback")

	var linked, linkedSlow, slow, fastLinked int64
	others := map[string]int64{} // linked samples not naming slowCallback, by stack, for a failure's log
	for _, s := range run.stacks("samples") {
		names := strings.Join(s.Functions, ";")
		inSlow := strings.Contains(names, "slowCallback")
		if inSlow {
			slow += s.Value
		}
		if s.Link == (pdata.ScopeLink{}) {
			continue
		}
		_, ok := run.records[s.Link]
		require.True(t, ok, "a linked sample's ids are those of a log record")
		require.Equal(t, "node.callback_scope", s.ProbeID)
		linked += s.Value
		if inSlow {
			linkedSlow += s.Value
		} else {
			others[names] += s.Value
		}
		if strings.Contains(names, "fastCallback") {
			fastLinked += s.Value
		}
	}
	t.Logf("linked %d samples, %d naming slowCallback (of %d), %d naming fastCallback", linked, linkedSlow, slow, fastLinked)
	for names, n := range others {
		t.Logf("linked, not in slowCallback: %d x %s", n, names)
	}
	require.Positive(t, linked)
	require.Zero(t, fastLinked, "fast callbacks' scopes make no record: their samples are not linked")
	// Measured 100% (356 of 356): the V8 walker names the JavaScript frame
	// even where a builtin without a frame of its own (LoadGlobalIC, ...)
	// is the leaf.
	require.GreaterOrEqual(t, float64(linkedSlow), 0.95*float64(linked), "linked samples name slowCallback")
	require.GreaterOrEqual(t, float64(linkedSlow), 0.95*float64(slow), "slowCallback's samples are linked")
}

// A Go method's scope is its goroutine's: the golink workload's handle
// burns in burnBefore, blocks (often resuming on another thread), then
// burns in burnAfter. CPU samples in both link to the call's record, those
// taken on another thread than the record names included (the record names
// the thread the call returned on); samples in outside, between calls,
// link to none. With goroutine labels read and with go_labels off (the
// goroutine alone is read). The calls start once the workload has burnt
// long enough for the receiver to learn the process from its samples: the
// goroutine of a thread is read from then on.
func TestSamplesLinkedToGoroutineScopes(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildGo(t, "golink")
	const goroutines, calls = 4, 12
	for _, tt := range []struct {
		name   string
		labels bool
	}{{"labels", true}, {"go_labels off", false}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.CPU.SamplesPerSecond = 199
			cfg.ReportInterval = time.Second
			cfg.GoLabels.Enabled = tt.labels
			cfg.Probes = []ProbeConfig{{
				ID: "go.handle", FileMatch: "^" + regexp.QuoteMeta(bin) + "$", Symbol: "main.(*server).handle",
			}}
			args := []string{fmt.Sprint(goroutines), fmt.Sprint(calls), "40", fmt.Sprint(testutil.Patient(2 * time.Second).Milliseconds())}
			if tt.labels {
				args = append(args, "labels")
			}
			run := runWithScopes(t, cfg, bin, args...)
			require.Len(t, run.records, goroutines*calls, "one record per call")

			var inScope, linked, otherThread, labelled, outsideLinked, outside int64
			for _, s := range run.stacks("samples") {
				in := slices.Contains(s.Functions, "main.burnBefore") || slices.Contains(s.Functions, "main.burnAfter")
				if slices.Contains(s.Functions, "main.outside") {
					outside += s.Value
					if s.Link != (pdata.ScopeLink{}) {
						outsideLinked += s.Value
					}
				}
				if !in {
					continue
				}
				inScope += s.Value
				if s.Link == (pdata.ScopeLink{}) {
					continue
				}
				rec, ok := run.records[s.Link]
				require.True(t, ok, "a linked sample's ids are a record's: %v", s.Link)
				require.Equal(t, "go.handle", s.ProbeID)
				linked += s.Value
				tid, _ := rec.Attributes().Get("thread.id")
				if s.Attributes["thread.id"] != tid.Int() {
					otherThread += s.Value
				}
				if _, ok := s.Attributes["request"]; ok {
					labelled += s.Value
				}
			}
			t.Logf("in handle: %d samples, %d linked, %d of them on another thread than their record's, %d labelled; outside: %d, %d linked",
				inScope, linked, otherThread, labelled, outside, outsideLinked)
			require.Positive(t, outside)
			require.Zero(t, outsideLinked, "samples between calls link to no record")
			require.GreaterOrEqual(t, float64(linked), 0.97*float64(inScope), "samples inside handle are linked")
			require.Positive(t, otherThread, "samples on another thread than the record's are linked")
			if tt.labels {
				require.GreaterOrEqual(t, float64(labelled), 0.9*float64(linked), "linked samples keep their labels")
			} else {
				require.Zero(t, labelled, "go_labels off: no labels")
			}
		})
	}
}
