//go:build linux

package e2e

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// pgRecord is one probe record as the debug exporter printed it.
type pgRecord struct {
	start    int64 // probe.start_time_unix_nano
	duration time.Duration
	tid      int64
	traceID  string
	spanID   string
	query    string // attribute query: query__start's str(arg0), "" without it
	hasQuery bool
}

var (
	pgRecordStart = regexp.MustCompile(`(?m)^LogRecord #\d+$`)
	pgDuration    = regexp.MustCompile(`probe\.duration_ns: Int\((\d+)\)`)
	pgTID         = regexp.MustCompile(`thread\.id: Int\((\d+)\)`)
	pgTraceID     = regexp.MustCompile(`(?m)^Trace ID: ([0-9a-f]{32})$`)
	pgSpanID      = regexp.MustCompile(`(?m)^Span ID: ([0-9a-f]{16})$`)
	pgQuery       = regexp.MustCompile(`(?m)^\s*-> query: Str\((.*)\)$`)
)

// pgRecords returns the pg.query records the debug exporter printed, in
// the order their scopes started.
func pgRecords(t *testing.T, text string) []pgRecord {
	t.Helper()
	var out []pgRecord
	at := pgRecordStart.FindAllStringIndex(text, -1)
	for i, loc := range at {
		end := len(text)
		if i+1 < len(at) {
			end = at[i+1][0]
		}
		chunk := text[loc[0]:end]
		if !strings.Contains(chunk, "Body: Str(pg.query)") {
			continue
		}
		var r pgRecord
		field := func(re *regexp.Regexp) string {
			m := re.FindStringSubmatch(chunk)
			require.NotNil(t, m, "%s in record:\n%s", re, chunk)
			return m[1]
		}
		ns, err := strconv.ParseInt(field(pgDuration), 10, 64)
		require.NoError(t, err)
		r.duration = time.Duration(ns)
		r.start, err = strconv.ParseInt(field(probeStarts), 10, 64)
		require.NoError(t, err)
		r.tid, err = strconv.ParseInt(field(pgTID), 10, 64)
		require.NoError(t, err)
		r.traceID, r.spanID = field(pgTraceID), field(pgSpanID)
		if m := pgQuery.FindStringSubmatch(chunk); m != nil {
			r.query, r.hasQuery = m[1], true
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// pgAgreement is how far a record's duration may be from the server's own
// measurement of the statement: the scopes differ by the statement's
// receipt (before query__start, in the server's) and its logging (after
// the server's end, before query__done): -37 to +301 µs here.
const pgAgreement = 500 * time.Microsecond

// pgLate is how much longer than its sleep the server may measure a
// statement for its record to be held to 1 ms of the sleep.
const pgLate = time.Millisecond - pgAgreement

// pgStatement is a statement the server logged with its duration
// (log_min_duration_statement=0).
type pgStatement struct {
	duration  time.Duration
	statement string
}

var pgLogged = regexp.MustCompile(`(?m)\[(\d+)\] LOG:  duration: ([0-9.]+) ms  statement: (.*)$`)

// pgStatements returns the statements the server logged, by backend pid,
// in order.
func pgStatements(t *testing.T, log string) map[int64][]pgStatement {
	t.Helper()
	out := map[int64][]pgStatement{}
	for _, m := range pgLogged.FindAllStringSubmatch(log, -1) {
		pid, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		ms, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		out[pid] = append(out[pid], pgStatement{time.Duration(ms * float64(time.Millisecond)), m[3]})
	}
	return out
}

// pgTexts returns the statements' texts.
func pgTexts(statements []pgStatement) []string {
	out := make([]string, len(statements))
	for i, s := range statements {
		out[i] = s.statement
	}
	return out
}

// PostgreSQL's own USDT probes through the collector: Debian's server,
// started after the collector on a private data directory, times each
// query between its query__start and query__done markers. One psql
// session runs 200 pg_sleep queries of known durations: 200 records, in
// the order sent, each within 1 ms of its sleep (or of the server's own
// measurement where the machine held the backend), none lost, each with
// the text of its query (query__start's first argument, the attribute
// query: str(arg0)); a second runs a CPU-heavy query, whose backend's CPU
// samples link to its record, which carries its text too.
func TestCollectorPostgresUSDT(t *testing.T) {
	began := time.Now()
	bin := collectorBinary(t)
	testutil.RequirePostgres(t)
	f, err := elf.Open(testutil.PostgresProgram)
	require.NoError(t, err)
	probes, err := usdt.Probes(f)
	f.Close()
	require.NoError(t, err)
	semaphores := map[string]uint64{}
	for _, p := range probes {
		if n := p.FullName(); n == "postgresql:query__start" || n == "postgresql:query__done" {
			semaphores[n] = p.Semaphore
		}
	}
	require.Len(t, semaphores, 2, "the query probes in %s", testutil.PostgresProgram)
	notes, err := testutil.OutputWithin(exec.Command("readelf", "-n", testutil.PostgresProgram), time.Minute)
	require.NoError(t, err)
	stapsdt := strings.Count(string(notes), "NT_STAPSDT")
	t.Logf("%s: %d SDT notes (readelf -n), %d probes (internal/usdt)", testutil.PostgresProgram, stapsdt, len(probes))
	require.Equal(t, len(probes), stapsdt)
	// initdb runs the server in single-user mode on its bootstrap SQL,
	// queries that fire the probes too: before the collector.
	pg := testutil.NewPostgres(t)

	sink, addr := startReleasedGRPCSink(t, 0)
	metricsPort := freePort(t)
	out, stop := startStoppableCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 2s
    cpu: {samples_per_second: 199}
    probes:
      - id: pg.query
        file_match: '/postgres$'
        usdt_entry: postgresql:query__start
        usdt_exit: postgresql:query__done
        min_duration: 1ms
        max_per_second: 100000
        attributes: {query: str(arg0)}
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc]}
    logs: {receivers: [bpfprofiler], exporters: [debug]}
`, addr, metricsPort))
	waitReady(t, out)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "probes attached") },
		30*time.Second, 100*time.Millisecond, "the collector did not attach the probes")

	// Started after the collector: the probes are attached through the
	// exec event, which sets their semaphores in the postmaster's memory
	// (the backends it forks inherit them).
	pg.Start(t, "log_min_duration_statement=0") // each statement's own duration, in the server's log
	var sems [2]uint16
	require.Eventually(t, func() bool {
		for i, n := range []string{"postgresql:query__start", "postgresql:query__done"} {
			sems[i] = testutil.USDTSemaphore(t, pg.PID, testutil.PostgresProgram, semaphores[n])
		}
		return sems[0] > 0 && sems[1] > 0
	}, testutil.Patient(20*time.Second), 20*time.Millisecond, "the query probes' semaphores in the postmaster")

	// 200 queries, each a line of its own (psql sends each statement as a
	// query: one query__start/query__done pair), sleeping 5, 10, 20 ms in
	// turn. Their backend runs them SCHED_FIFO (psql's shell sets it by
	// the pid the session asked for), as the sdtpair workload runs: most
	// of its sleeps end on time on a machine busy with other tests, so
	// their known durations are the true ones. The backend's pid and its
	// policy are the session's first lines; its statements print empty
	// lines.
	sleeps := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	script := []string{
		"SELECT pg_backend_pid() AS backend \\gset",
		"\\echo :backend",
		"\\setenv BACKEND :backend",
		`\! chrt -f -p 10 "$BACKEND" && echo SCHED_FIFO`,
	}
	var sent []time.Duration
	for i := range 200 {
		d := sleeps[i%len(sleeps)]
		sent = append(sent, d)
		script = append(script, fmt.Sprintf("SELECT pg_sleep(%g);", d.Seconds()))
	}
	printed := strings.Fields(pg.Psql(t, testutil.Patient(time.Minute), strings.Join(script, "\n")+"\n"))
	require.Len(t, printed, 2, "the sleeping session's backend pid and policy")
	require.Equal(t, "SCHED_FIFO", printed[1])
	sleeper, err := strconv.ParseInt(printed[0], 10, 64)
	require.NoError(t, err)
	// The CPU-heavy query (1.3 to 2.7 s here), in a session of its own
	// run SCHED_OTHER.
	const cpuQuery = "SELECT count(*) FROM generate_series(1, 10000000);"
	printed = strings.Fields(pg.Psql(t, testutil.Patient(time.Minute), "SELECT pg_backend_pid();\n"+cpuQuery+"\n"))
	require.Len(t, printed, 2, "the CPU query's session's backend pid and count")
	require.Equal(t, "10000000", printed[1])
	burner, err := strconv.ParseInt(printed[0], 10, 64)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(pgRecords(t, out.String())) >= len(sent)+1 },
		testutil.Patient(30*time.Second), 100*time.Millisecond, "probe records missing from the debug exporter")
	// The CPU query's last samples reach a report and are linked; an
	// unexpected record would arrive. A sample drained while its scope is
	// open is held for its record two report intervals (4 s), longer than
	// the CPU query lasts (1.5 to 2.7 s here).
	time.Sleep(4 * time.Second)
	metrics := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	require.NoError(t, stop())

	// Every record is one of the two sessions': in each, the statements'
	// records in order, the first (the pid query, a new backend's first
	// statement: its catalog lookups can take past min_duration, 2.7 ms
	// once under load) possibly left out by min_duration (1 ms).
	records := pgRecords(t, out.String())
	statements := pgStatements(t, pg.Log(t))
	var sleeping, burning []pgRecord
	for _, r := range records {
		switch r.tid {
		case sleeper:
			sleeping = append(sleeping, r)
		case burner:
			burning = append(burning, r)
		default:
			t.Fatalf("a record of thread %d, not of the sessions' backends %d and %d", r.tid, sleeper, burner)
		}
	}
	setup := len(sleeping) - len(sent) + len(burning) - 1
	t.Logf("records: %d of the sleeping session, %d of the CPU query's; %d of the pid queries", len(sleeping), len(burning), setup)
	require.Contains(t, []int{len(sent), len(sent) + 1}, len(sleeping), "the sleeping session's records")
	require.Contains(t, []int{1, 2}, len(burning), "the CPU query's session's records")
	for _, r := range append(append([]pgRecord{}, sleeping...), burning...) {
		require.True(t, r.hasQuery, "a record without its query text: %+v", r)
	}
	sleeping = sleeping[len(sleeping)-len(sent):]
	logged := statements[sleeper]
	require.Len(t, logged, len(sent)+1, "the sleeping session's statements in the server's log")
	logged = logged[1:]

	// Each record lasts at least its sleep and agrees with the server's
	// own measurement of the statement (pgAgreement), and is within 1 ms
	// of its sleep where the server measured at most 0.5 ms more (so its
	// record at most 1 ms): a sleep ends late where the machine held the
	// backend's CPU even at SCHED_FIFO (an interrupt, the hypervisor), up
	// to +2 ms for up to 9 in 200 queries on a 2-CPU machine busy with
	// other tests (load 3.7). Those are logged and counted.
	type bucket struct {
		n, late        int
		minErr, maxErr time.Duration
	}
	buckets := map[time.Duration]*bucket{}
	minOff, maxOff := time.Hour, -time.Hour // record less the server's measurement
	for i, d := range sent {
		r, l := sleeping[i], logged[i]
		require.Equal(t, fmt.Sprintf("SELECT pg_sleep(%g);", d.Seconds()), l.statement, "statement %d", i)
		// The text the server received, as its log has it: psql sends the
		// line, semicolon and all.
		require.Equal(t, l.statement, r.query, "query %d's record's text", i)
		e := r.duration - d
		off := r.duration - l.duration
		minOff, maxOff = min(minOff, off), max(maxOff, off)
		require.True(t, e >= 0, "query %d: a record of %v for a sleep of %v", i, r.duration, d)
		require.True(t, off > -pgAgreement && off < pgAgreement,
			"query %d: a record of %v, the server measured %v", i, r.duration, l.duration)
		b := buckets[d]
		if b == nil {
			b = &bucket{minErr: time.Hour}
			buckets[d] = b
		}
		b.n++
		b.minErr, b.maxErr = min(b.minErr, e), max(b.maxErr, e)
		if l.duration > d+pgLate {
			b.late++
			t.Logf("query %d: the server measured %v for a sleep of %v, the record %v", i, l.duration, d, r.duration)
			continue
		}
		require.True(t, e <= time.Millisecond, "query %d: a record of %v for a sleep of %v", i, r.duration, d)
	}
	var shown []string
	late := 0
	for _, d := range sleeps {
		b := buckets[d]
		late += b.late
		shown = append(shown, fmt.Sprintf("%v: %d, +%v..+%v", d, b.n, b.minErr.Round(time.Microsecond), b.maxErr.Round(time.Microsecond)))
	}
	require.Equal(t, []int{67, 67, 66}, []int{buckets[sleeps[0]].n, buckets[sleeps[1]].n, buckets[sleeps[2]].n})
	require.LessOrEqual(t, late, len(sent)/4, "sleeps the server measured late: most are held to 1 ms")
	cpu := burning[len(burning)-1]
	require.Greater(t, cpu.duration, 200*time.Millisecond, "the CPU query")
	require.Equal(t, cpuQuery, cpu.query, "the CPU query's record's text")
	require.Equal(t, []string{cpuQuery}, pgTexts(statements[burner][1:]), "the CPU query in the server's log")
	// None lost: every completed scope was read and none dropped.
	require.Equal(t, float64(len(records)), metricValue(metrics, "otelcol_bpfprofiler_probe_records"))
	require.Zero(t, metricValue(metrics, "otelcol_bpfprofiler_probe_records_dropped"))

	// The CPU query's backend spent its CPU time in the query: those
	// samples link to its record and carry probe.id. The rest are its
	// connection's setup (loading libraries: libcrypto, libLLVM) and exit,
	// 2 to 8 samples here, and any of its pid query, linked to that
	// query's record where it has one.
	profiles, err := readReleased(sink.requests())
	require.NoError(t, err)
	var all, linked int64
	unlinked := map[string]int64{} // their stacks, for the log
	links := map[string]bool{}
	for _, r := range burning {
		links[r.traceID+"/"+r.spanID] = true
	}
	for _, p := range profiles {
		if p.SampleType != "samples" {
			continue
		}
		for _, s := range p.Samples {
			if s.Attributes["process.pid"] != burner {
				continue
			}
			all += s.Value
			if s.SpanID == "" {
				require.Nil(t, s.Attributes["probe.id"], "an unlinked sample has no probe.id")
				unlinked[strings.Join(s.Functions[:min(4, len(s.Functions))], ";")] += s.Value
				continue
			}
			require.True(t, links[s.TraceID+"/"+s.SpanID], "a sample's link %s/%s is a record's", s.TraceID, s.SpanID)
			require.Equal(t, "pg.query", s.Attributes["probe.id"])
			if s.SpanID == cpu.spanID {
				linked += s.Value
			}
		}
	}
	t.Logf("unlinked samples of the CPU query's backend: %v", unlinked)
	outcomes := map[string]float64{}
	for _, o := range []string{"linked", "no_record", "timeout", "held_full"} {
		outcomes[o] = metricValue(metrics, "otelcol_bpfprofiler_probe_samples", `outcome="`+o+`"`)
	}
	t.Logf("otelcol_bpfprofiler_probe_samples: %v", outcomes)
	require.Zero(t, outcomes["timeout"]+outcomes["held_full"], "samples held for a record and let go unlinked")
	share := float64(linked) / float64(max(all, 1))
	matrixFigure(t, "%d SDT notes, semaphores %d/%d; sleeps (records, error) %s, %d late by the server's clock, "+
		"records %v..%v of it; %d pid query records; CPU query %v: %d of %d samples linked (%.1f%%); test %v",
		stapsdt, sems[0], sems[1], strings.Join(shown, ", "), late, minOff.Round(time.Microsecond), maxOff.Round(time.Microsecond), setup,
		cpu.duration.Round(time.Millisecond), linked, all, 100*share, time.Since(began).Round(100*time.Millisecond))
	require.GreaterOrEqual(t, linked, int64(50), "samples of the CPU query (199 per second of CPU)")
	require.GreaterOrEqual(t, share, 0.9, "the backend's samples linked to the CPU query's record")
}
