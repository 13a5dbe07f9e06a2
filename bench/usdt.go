package main

// Suite usdt: what USDT probes cost the traced program, in two parts.
//
// Part 1, per fired probe: workloads/usdtloop.c calls usdt_call()
// -usdt-calls times in a tight loop; usdt_call has a USDT pair of its own
// (usdtloop:call__start at its entry with argument x, usdtloop:call__done
// at its exit, no semaphores) and is probeable by symbol. Scenarios,
// interleaved over rounds (order rotated per round): the workload alone
// (1000 times the calls, to last long enough to time), and beside the collector (cpu and off_cpu off) with one probe on it:
// `symbol: usdt_call` (a uprobe at its entry, a uretprobe), `usdt_entry` +
// `usdt_exit` (a uprobe at each site), and the same with `attributes: {x:
// arg0}` (the argument fetched in BPF at the entry). Every probe has
// min_duration 1s: the BPF program drops each record at the exit, so what
// is measured is the traced thread's cost (the traps and the programs),
// not the collector's logs pipeline on the other CPU. A call fires two
// probes in each scenario; the per-fire cost is (ns/call - the round's
// no-probe ns/call) / 2.
//
// Part 2, PostgreSQL: Debian's pgbench, select-only (-S, simple protocol,
// -pgbench-clients clients and threads, -pgbench-duration each run) on a
// private server of the bench's (testutil.InitPostgres, scale 1), with no
// collector, the collector with no probe attached (cpu and off_cpu off;
// the pg.query probe on a file no process maps, as a receiver with nothing
// to do is a configuration error: the collector's idle cost), and the collector with the pg.query USDT probe on
// postgresql:query__start/query__done (min_duration 0, max_per_second the
// default 1000: every statement fires both probes, at most 1000 records a
// second reach the logs pipeline), without and with the attribute {query:
// str(arg0)} (the statement's text read in BPF at each query__start). The
// report gives TPS and the server's CPU time per transaction (its backends'
// CPU time, reaped by the postmaster, over pgbench's transactions: the
// probes' traps run there), each as a ratio to the no-collector run of the
// same round, after a warm-up run that is not counted.

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

//go:embed workloads/usdtloop.c
var usdtloopSource []byte

// Scenario names of the usdt suite.
const (
	scUSDTNone    = "no probe"
	scUSDTSymbol  = "symbol: usdt_call"
	scUSDTPair    = "usdt_entry/usdt_exit"
	scUSDTArg     = "usdt_entry/usdt_exit + {x: arg0}"
	scPgAlone     = "no collector"
	scPgCollector = "collector, no probe attached"
	scPgProbe     = "collector, pg.query"
	scPgQuery     = "collector, pg.query + {query: str(arg0)}"
)

const (
	usdtSymbol = "usdt_call"
	// usdtFiresPerCall: each scenario's probe traps twice a call (entry
	// and return, or the two USDT sites).
	usdtFiresPerCall = 2
	// usdtBaselineFactor: the no-probe run makes this many times the calls.
	usdtBaselineFactor = 1000
	pgbenchScale       = 1
	pgProbeID          = "pg.query"
)

// runUSDTSuite runs both parts of the suite.
func runUSDTSuite(ctx context.Context, e env) error {
	if err := runUSDTLoop(ctx, e); err != nil {
		return err
	}
	fmt.Println()
	return runPgbenchSuite(ctx, e)
}

// runUSDTLoop is part 1: ns per call of usdtloop under each probe.
func runUSDTLoop(ctx context.Context, e env) error {
	bin, err := buildWorkload(ctx, e.dir, "usdtloop", usdtloopSource)
	if err != nil {
		return err
	}
	calls := e.o.usdtCalls
	w := workload{name: "usdtloop", bin: bin, args: []string{strconv.FormatUint(calls, 10)}}
	fmt.Printf("== suite usdt, part 1: usdtloop, %d calls of %s per run; probes with min_duration %v (records dropped in BPF) ==\n",
		calls, usdtSymbol, filterMinDur)
	// The loop alone takes a nanosecond or two a call: its run makes
	// usdtBaselineFactor times the calls, to last long enough to time.
	alone := w
	alone.args = []string{strconv.FormatUint(calls*usdtBaselineFactor, 10)}
	scs := []probeScenario{{scUSDTNone, func(ctx context.Context) (probeRun, error) {
		res, err := runBaseline(ctx, alone)
		return probeRun{wall: res.wall}, err
	}}}
	count := func(name string) uint64 {
		if name == scUSDTNone {
			return calls * usdtBaselineFactor
		}
		return calls
	}
	if !e.o.skipCollector {
		match := "^" + regexp.QuoteMeta(bin) + "$"
		for _, sc := range []struct {
			name  string
			probe benchProbe
		}{
			{scUSDTSymbol, benchProbe{symbol: usdtSymbol}},
			{scUSDTPair, benchProbe{usdtEntry: "usdtloop:call__start", usdtExit: "usdtloop:call__done"}},
			{scUSDTArg, benchProbe{usdtEntry: "usdtloop:call__start", usdtExit: "usdtloop:call__done", attributes: "{x: arg0}"}},
		} {
			p := sc.probe
			p.id, p.fileMatch, p.minDuration = benchProbeID, match, filterMinDur
			cfg := e.collector(profileConfig{probes: []benchProbe{p}})
			scs = append(scs, probeScenario{sc.name, func(ctx context.Context) (probeRun, error) {
				return runProbedByCollector(ctx, cfg, w, calls, false, false)
			}})
		}
	}
	perCall := map[string][]float64{}
	overhead := map[string][]float64{} // ns per call over the round's no-probe run
	for r := range e.o.rounds {
		round := map[string]float64{}
		var line strings.Builder
		fmt.Fprintf(&line, "round %d/%d:", r+1, e.o.rounds)
		for _, sc := range rotated(scs, r) {
			res, err := sc.run(ctx)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, sc.name, err)
			}
			if res.warn != "" {
				fmt.Printf("warning: round %d, %s: %s\n", r+1, sc.name, res.warn)
			}
			round[sc.name] = nsPerCall(res.wall, count(sc.name))
			fmt.Fprintf(&line, "  %s %.0fns", sc.name, round[sc.name])
			if err := pause(ctx, 300*time.Millisecond); err != nil {
				return err
			}
		}
		for name, ns := range round {
			perCall[name] = append(perCall[name], ns)
			overhead[name] = append(overhead[name], ns-round[scUSDTNone])
		}
		fmt.Println(line.String())
	}
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	base := perCall[scUSDTNone]
	fmt.Printf("%-36s %10s %10s %12s %12s\n", "scenario (medians over rounds)", "ns/call", "x no probe", "+ns/call", "ns/fire")
	for _, sc := range scs {
		ns := perCall[sc.name]
		fmt.Printf("%-36s %10.1f %10.2f %12.1f %12.1f\n", sc.name, median(ns), median(perRound(ns, base)),
			median(overhead[sc.name]), median(overhead[sc.name])/usdtFiresPerCall)
	}
	if sym, pair := overhead[scUSDTSymbol], overhead[scUSDTPair]; len(sym) > 0 && len(pair) > 0 {
		fmt.Printf("USDT pair's cost per call / symbol probe's: %.2f; with {x: arg0} / without: %.2f\n",
			median(perRound(pair, sym)), median(perRound(overhead[scUSDTArg], pair)))
	}
	return nil
}

// minus returns a[i]-b[i] for each round i.
func minus(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// pause waits d unless ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// pgRun is one pgbench run under one scenario.
type pgRun struct {
	tps float64
	// serverNs is the server's CPU time per transaction: its backends'
	// (reaped by the postmaster at their exit) over the transactions
	// pgbench made. The probes' traps and BPF programs run in the
	// backends, and a backend's CPU time depends less on what else the
	// machine runs than its throughput does.
	serverNs float64
	records  uint64 // probe records the debug exporter logged
	warn     string
}

// runPgbenchSuite is part 2: pgbench's select-only TPS beside the
// collector with and without the pg.query probe.
func runPgbenchSuite(ctx context.Context, e env) error {
	if _, err := os.Stat(testutil.PostgresPgbench); err != nil {
		return fmt.Errorf("pgbench (make test-tools installs postgresql-15): %w", err)
	}
	// The server's user walks through the scratch directory to its own.
	if err := os.Chmod(e.dir, 0o711); err != nil {
		return err
	}
	pgDir := filepath.Join(e.dir, "pg")
	if err := os.Mkdir(pgDir, 0o700); err != nil {
		return err
	}
	pg, err := testutil.InitPostgres(pgDir)
	if err != nil {
		return err
	}
	defer func() {
		if err := pg.StopServer(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: warning: %v\n", err)
		}
	}()
	// No autovacuum: its workers, coming and going, would blur the count
	// of the postmaster's children that tells when pgbench's backends are
	// reaped (a select-only load leaves nothing to vacuum).
	if err := pg.StartServer("autovacuum=off"); err != nil {
		return err
	}
	conn := []string{"-h", pg.SocketDir, "-U", testutil.PostgresUser}
	initArgs := append(append([]string{"-i", "-q", "-s", strconv.Itoa(pgbenchScale)}, conn...), "postgres")
	if out, err := exec.CommandContext(ctx, testutil.PostgresPgbench, initArgs...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %v\n%s", err, tail(string(out), 10))
	}
	clients := strconv.Itoa(e.o.pgbenchClients)
	secs := strconv.Itoa(max(1, int(e.o.pgbenchDuration.Seconds())))
	runArgs := append(append([]string{"-n", "-S", "-c", clients, "-j", clients, "-T", secs}, conn...), "postgres")
	fmt.Printf("== suite usdt, part 2: %s %s (scale %d), postgres pid %d; collector with cpu and off_cpu off ==\n",
		testutil.PostgresPgbench, strings.Join(runArgs, " "), pgbenchScale, pg.PID)

	pgbench := func(ctx context.Context) (pgRun, error) {
		children, err := childCount(pg.PID)
		if err != nil {
			return pgRun{}, err
		}
		cpu0, err := reapedChildrenCPU(pg.PID)
		if err != nil {
			return pgRun{}, err
		}
		cmd := exec.CommandContext(ctx, testutil.PostgresPgbench, runArgs...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return pgRun{}, fmt.Errorf("pgbench: %v\n%s", err, tail(out.String(), 10))
		}
		tps, txns, err := parsePgbench(out.String())
		if err != nil {
			return pgRun{}, err
		}
		// pgbench's backends exit once it disconnected: wait until the
		// postmaster has reaped them (its background processes stay).
		var res pgRun
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := childCount(pg.PID)
			if err != nil {
				return pgRun{}, err
			}
			if n <= children {
				break
			}
			if time.Now().After(deadline) {
				res.warn = fmt.Sprintf("the postmaster has %d children 5 s after pgbench, %d before: its server CPU is short", n, children)
				break
			}
			if err := pause(ctx, 10*time.Millisecond); err != nil {
				return pgRun{}, err
			}
		}
		cpu1, err := reapedChildrenCPU(pg.PID)
		if err != nil {
			return pgRun{}, err
		}
		res.tps, res.serverNs = tps, float64((cpu1-cpu0).Nanoseconds())/float64(max(txns, 1))
		return res, nil
	}
	// One run first, not counted: the server's caches and the table's
	// pages warm up.
	if _, err := pgbench(ctx); err != nil {
		return err
	}
	type pgScenario struct {
		name string
		run  func(ctx context.Context) (pgRun, error)
	}
	scs := []pgScenario{{scPgAlone, pgbench}}
	if !e.o.skipCollector {
		probe := benchProbe{id: pgProbeID, fileMatch: "/postgres$", usdtEntry: "postgresql:query__start", usdtExit: "postgresql:query__done",
			maxPerSecond: 1000}
		withQuery := probe
		withQuery.attributes = "{query: str(arg0)}"
		// A receiver with nothing to do is a configuration error: the
		// collector without a probe has the same probe on a file no
		// process maps.
		nowhere := probe
		nowhere.fileMatch = "^/nonexistent/postgres$"
		for _, sc := range []struct {
			name   string
			probe  benchProbe
			probed bool
		}{{scPgCollector, nowhere, false}, {scPgProbe, probe, true}, {scPgQuery, withQuery, true}} {
			cfg := e.collector(profileConfig{probes: []benchProbe{sc.probe}})
			scs = append(scs, pgScenario{sc.name, func(ctx context.Context) (pgRun, error) {
				return pgbenchBesideCollector(ctx, cfg, sc.probed, pgbench)
			}})
		}
	}
	tps := map[string][]float64{}
	serverNs := map[string][]float64{}
	records := map[string][]float64{}
	for r := range e.o.rounds {
		round := map[string]float64{}
		var line strings.Builder
		fmt.Fprintf(&line, "round %d/%d:", r+1, e.o.rounds)
		for _, sc := range rotated(scs, r) {
			res, err := sc.run(ctx)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, sc.name, err)
			}
			if res.warn != "" {
				fmt.Printf("warning: round %d, %s: %s\n", r+1, sc.name, res.warn)
			}
			round[sc.name] = res.tps
			serverNs[sc.name] = append(serverNs[sc.name], res.serverNs)
			records[sc.name] = append(records[sc.name], float64(res.records))
			fmt.Fprintf(&line, "  %s %.0f tps %.1fµs", sc.name, res.tps, res.serverNs/1e3)
			if res.records > 0 {
				fmt.Fprintf(&line, " (%d records)", res.records)
			}
			if err := pause(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		}
		for name, v := range round {
			tps[name] = append(tps[name], v)
		}
		fmt.Println(line.String())
	}
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	fmt.Println("(round lines: tps, and the server's CPU µs per transaction)")
	base, baseNs := tps[scPgAlone], serverNs[scPgAlone]
	fmt.Printf("%-42s %8s %14s %13s %12s %14s %13s %8s\n", "scenario (medians over rounds)", "tps", "x no collector", "(min..max)",
		"server µs/tx", "x no collector", "(min..max)", "records")
	for _, sc := range scs {
		ratios, nsRatios := perRound(tps[sc.name], base), perRound(serverNs[sc.name], baseNs)
		fmt.Printf("%-42s %8.0f %14.3f %6.3f..%.3f %12.1f %14.3f %6.3f..%.3f %8.0f\n", sc.name, median(tps[sc.name]), median(ratios),
			slices.Min(ratios), slices.Max(ratios), median(serverNs[sc.name])/1e3, median(nsRatios), slices.Min(nsRatios), slices.Max(nsRatios),
			median(records[sc.name]))
	}
	if p, q, c := tps[scPgProbe], tps[scPgQuery], tps[scPgCollector]; len(p) > 0 {
		pn, qn, cn := serverNs[scPgProbe], serverNs[scPgQuery], serverNs[scPgCollector]
		fmt.Printf("tps: pg.query / collector without probe %.3f; with {query: str(arg0)} / without %.3f\n",
			median(perRound(p, c)), median(perRound(q, p)))
		fmt.Printf("server CPU per transaction: pg.query / collector without probe %.3f (+%.1f µs); with {query: str(arg0)} / without %.3f (+%.1f µs)\n",
			median(perRound(pn, cn)), median(minus(pn, cn))/1e3, median(perRound(qn, pn)), median(minus(qn, pn))/1e3)
	}
	return nil
}

// pgbenchBesideCollector starts the collector (its start-up scan attaches
// any probe to the running server's postgres), runs pgbench and stops the
// collector; with probed, it checks the probe's two uprobes are attached
// and counts the records the debug exporter logged.
func pgbenchBesideCollector(ctx context.Context, cfg collectorConfig, probed bool, pgbench func(context.Context) (pgRun, error)) (pgRun, error) {
	c, err := startCollector(ctx, cfg)
	if err != nil {
		return pgRun{}, err
	}
	defer func() { _ = c.stop() }() // stopped below; this is for early returns
	if probed {
		logText, err := os.ReadFile(c.logPath)
		if err != nil {
			return pgRun{}, err
		}
		if n, ok := attachedUprobes(string(logText)); !ok || n < 2 {
			return pgRun{}, fmt.Errorf("collector attached %d uprobes (logged: %t), want 2 (query__start and query__done); its output (%s):\n%s",
				n, ok, c.logPath, c.lastLines(30))
		}
	}
	out, err := pgbench(ctx)
	if err != nil {
		return pgRun{}, err
	}
	if err := c.stop(); err != nil {
		return pgRun{}, err
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		return pgRun{}, err
	}
	defer f.Close()
	logText, err := io.ReadAll(f)
	if err != nil {
		return pgRun{}, err
	}
	out.records = logRecordsLogged(string(logText))
	if probed && out.records == 0 {
		out.warn = strings.TrimPrefix(out.warn+"; the debug exporter logged no probe record", "; ")
	}
	return out, nil
}

var (
	pgbenchTPS  = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchTxns = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
)

// parsePgbench returns the transactions per second and the transactions
// pgbench printed.
func parsePgbench(out string) (tps float64, txns uint64, err error) {
	m, n := pgbenchTPS.FindStringSubmatch(out), pgbenchTxns.FindStringSubmatch(out)
	if m == nil || n == nil {
		return 0, 0, fmt.Errorf("no tps or transactions line in pgbench's output:\n%s", tail(out, 10))
	}
	if tps, err = strconv.ParseFloat(m[1], 64); err != nil {
		return 0, 0, err
	}
	txns, err = strconv.ParseUint(n[1], 10, 64)
	return tps, txns, err
}

// childCount returns how many children process pid has.
func childCount(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	return len(strings.Fields(string(b))), nil
}

// reapedChildrenCPU returns the CPU time of the children process pid has
// waited for (cutime + cstime of /proc/<pid>/stat).
func reapedChildrenCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseReapedCPU(b)
}

// parseReapedCPU returns cutime + cstime of a /proc/<pid>/stat line: the
// 16th and 17th fields, counted after the command's closing parenthesis
// (the command may hold spaces and parentheses).
func parseReapedCPU(stat []byte) (time.Duration, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat line without a command: %q", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 15 {
		return 0, fmt.Errorf("stat line of %d fields: %q", len(f)+2, s)
	}
	var ticks uint64
	for _, v := range f[13:15] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat line: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}
