//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The wall clock stepped 5 minutes forward, then 10 back, while the
// collector runs: within a report of each step the profiles' times and the
// probe records' timestamps are on the new wall clock, and every duration
// (a profile's window, a probe's scope) stays what the monotonic clock
// measured.
func TestFaultClockSteps(t *testing.T) {
	bin, _ := faultLength(t)
	restoreWallClock(t)
	workload := testutil.BuildC(t, "restartprobe.c")
	testutil.StartWorkloadChild(t, workload, t.TempDir()+"/status").Until(t, testutil.Patient(30*time.Second),
		func(l string) bool { return l == "ready" })
	profiles, profilesAddr := startOTLPServer(t)
	logs, logsAddr := startOTLPLogsServer(t)
	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 1s
    cpu: {enabled: true}
    probes:
      - {id: fault.sleep, file_match: '^%s$', symbol: fault_sleep}
exporters:
  otlp_grpc/profiles: {endpoint: %s, tls: {insecure: true}}
  otlp_grpc/logs: {endpoint: %s, tls: {insecure: true}}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc/profiles]}
    logs: {receivers: [bpfprofiler], exporters: [otlp_grpc/logs]}
`, regexp.QuoteMeta(workload), profilesAddr, logsAddr))
	waitReady(t, out)

	// One report to settle, then each step; what comes 2 reports after a
	// step must be on the new wall clock.
	for _, step := range []time.Duration{0, 5 * time.Minute, -10 * time.Minute} {
		stepWallClock(t, step)
		stepped := time.Now()
		time.Sleep(2*time.Second + clock.Refresh)
		fromProfiles, fromLogs := len(profiles.all()), len(logs.all())
		time.Sleep(3 * time.Second)
		until := time.Now()

		var windows int
		for _, pd := range profiles.all()[fromProfiles:] {
			eachProfile(pd, func(p pprofile.Profile) {
				windows++
				begin := p.Time().AsTime()
				d := time.Duration(p.DurationNano())
				require.Truef(t, !begin.Before(stepped.Add(-2*time.Second)) && !begin.Add(d).After(until),
					"step %v: profile %v+%v outside the new wall clock's [%v, %v]", step, begin, d, stepped, until)
				require.Truef(t, d > 0 && d < 3*time.Second, "step %v: profile window %v (report interval 1 s)", step, d)
			})
		}
		var records int
		for _, ld := range logs.all()[fromLogs:] {
			eachLogRecord(ld, func(r plog.LogRecord) {
				records++
				at := r.Timestamp().AsTime()
				d, _ := r.Attributes().Get(attrkey.ProbeDurationNS)
				require.Truef(t, !at.Before(stepped.Add(-2*time.Second)) && !at.After(until),
					"step %v: record at %v outside the new wall clock's [%v, %v]", step, at, stepped, until)
				dur := time.Duration(d.Int())
				require.Truef(t, dur >= 3*time.Millisecond && dur < time.Second,
					"step %v: fault_sleep's scope lasted %v (it sleeps 3 ms)", step, dur)
			})
		}
		require.Positive(t, windows, "step %v: no profile in 3 s", step)
		require.Positive(t, records, "step %v: no probe record in 3 s", step)
		faultFigure(t, "wall clock stepped %v: %d profiles and %d probe records on the new wall clock within %v, every duration monotonic",
			step, windows, records, 2*time.Second+clock.Refresh)
	}
}

// restoreWallClock puts the wall clock back where it would be without the
// test's steps, at cleanup: at its offset from CLOCK_MONOTONIC now.
func restoreWallClock(t *testing.T) {
	t.Helper()
	offset, err := clock.MeasureOffset()
	require.NoError(t, err)
	t.Cleanup(func() {
		ts := unix.NsecToTimespec(int64(clock.Now()) + offset)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			t.Errorf("restore the wall clock: %v", err)
		}
	})
}

// stepWallClock moves CLOCK_REALTIME by d.
func stepWallClock(t *testing.T, d time.Duration) {
	t.Helper()
	if d == 0 {
		return
	}
	ts := unix.NsecToTimespec(time.Now().Add(d).UnixNano())
	require.NoError(t, unix.ClockSettime(unix.CLOCK_REALTIME, &ts), "step the wall clock")
}

func eachProfile(pd pprofile.Profiles, f func(pprofile.Profile)) {
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				f(p)
			}
		}
	}
}

func eachLogRecord(ld plog.Logs, f func(plog.LogRecord)) {
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, r := range sl.LogRecords().All() {
				f(r)
			}
		}
	}
}

// otlpLogsServer is a real OTLP/gRPC logs endpoint on loopback keeping every
// request.
type otlpLogsServer struct {
	plogotlp.UnimplementedGRPCServer

	mu       sync.Mutex
	received []plog.Logs
}

func startOTLPLogsServer(t *testing.T) (*otlpLogsServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &otlpLogsServer{}
	gs := grpc.NewServer()
	plogotlp.RegisterGRPCServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return srv, lis.Addr().String()
}

func (s *otlpLogsServer) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	ld := plog.NewLogs()
	req.Logs().CopyTo(ld)
	s.mu.Lock()
	s.received = append(s.received, ld)
	s.mu.Unlock()
	return plogotlp.NewExportResponse(), nil
}

func (s *otlpLogsServer) all() []plog.Logs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]plog.Logs(nil), s.received...)
}
