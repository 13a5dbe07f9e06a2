package main

// Suite busy: the collector on a host that looks like a busy Kubernetes
// node, in four phases, each measured for -busy-phase after -busy-settle:
//
//  1. idle host: nothing but the collector;
//  2. + 2000 idle processes (`sleep 100000`);
//  3. + 100 short-lived execs per second (/bin/true, at most 8 at once; the
//     rate achieved is reported), the sleepers kept;
//  4. runtimes at once (sleepers and execs stopped): node, OpenJDK 17 and
//     Temurin 25 (source launcher), CPython 3.9 to 3.13 from pyenv, each
//     burning ~5 ms of CPU then sleeping 45 ms, and xz -9 -T1 compressing
//     urandom-derived data, sleeping 9 times as long as each run took.
//     Missing runtimes are skipped with a note.
//
// Each phase's load is set up once and measured twice: first without the
// collector (the host's CPU from /proc/stat), then beside a fresh collector
// (host-wide, cpu 99 Hz, off_cpu with min_block 1ms, report_interval 10s,
// unwinding auto), started after the load (phase 2 starts its sleepers
// again once the collector is ready, so that it sees 2000 processes start,
// as a DaemonSet sees a node's), measured after the settle time: its CPU
// (utime+stime of /proc/<pid>/stat over the phase), peak and final RSS, the
// memlock of its BPF maps (from /proc/<pid>/fdinfo) and its own metrics from
// its Prometheus endpoint (unwind tables, failures, walks over the phase).
// With -busy-burst phase 4's runtimes are started again once each profiler
// is ready (a deploy: all at once), and measured from -busy-settle after.
// After phase 4 a last fresh collector is started with the runtimes running
// and its CPU over its first 10 s is the start-up figure. -rounds does not
// apply: every phase runs once; -busy-phases measures only some. With
// -busy-peer another profiler (the OpenTelemetry eBPF profiler built under
// /tmp) is measured the same way in each phase, after the collector, on
// the same load: the last table puts the two side by side.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	busySleepers       = 2000
	busyExecRate       = 100 // execs per second in phase 3
	busyStartupWindow  = 10 * time.Second
	busyReportInterval = 10 * time.Second
)

// busyRow is one phase's figures.
type busyRow struct {
	name     string
	hostBase float64      // host CPU without the collector, % of a core
	execBase float64      // execs per second achieved without the collector (0: no pacer)
	col      *busyFigures // nil with -skip-collector
	peer     *peerFigures // nil without -busy-peer
	notes    []string
}

// busyFigures are the collector's figures over a phase.
type busyFigures struct {
	cpuTicks, cpuSched float64 // % of a core; cpuSched -1 when unavailable
	// sinceRenew is the CPU from the renewal of the runtimes (a burst) to
	// the end of the phase, % of a core; 0 without one.
	sinceRenew         float64
	peakRSS, endRSS    uint64
	mapBytes           uint64
	maps               int
	host               float64 // host CPU beside the collector, % of a core
	execRate           float64
	metrics            bool               // the scrapes below worked
	failed             map[string]float64 // unwind_tables_failed by reason, since start
	walks              map[string]float64 // unwind_walks by end reason, over the phase
	tables, tableBytes float64            // at the end
	otlp               otlpWindow         // what its otlp_grpc exporter sent over the phase
}

// busyLoad is what runs besides the collector; stop ends all of it.
type busyLoad struct {
	sleepers *sleepers
	pacer    *execPacer
	runtimes *runtimeSet
	// renew restarts the phase's new processes once a collector is
	// ready, so it sees them start, as a node's DaemonSet does (nil: the
	// load stays as it is).
	renew func() error
}

func (l *busyLoad) stop() {
	l.pacer.stop()
	l.sleepers.kill()
	l.runtimes.stop()
	l.pacer, l.sleepers, l.runtimes = nil, nil, nil
}

func runBusySuite(ctx context.Context, e env) (err error) {
	selected, err := parseBusyPhases(e.o.busyPhases)
	if err != nil {
		return err
	}
	offCPU := "off_cpu min_block 1ms"
	if e.o.busyCPUOnly {
		offCPU = "no off_cpu"
	}
	fmt.Printf("== suite busy: phases %s of %v after %v of settle; collector cpu 99 Hz, %s, report_interval %v ==\n",
		e.o.busyPhases, e.o.busyPhase, e.o.busySettle, offCPU, busyReportInterval)
	var load busyLoad
	defer load.stop() // on every return, errors and interrupts included
	var rows []busyRow
	phase := func(n int, name string) error {
		if !selected[n] {
			return nil
		}
		fmt.Printf("phase %s: settling %v, then measuring %v without the collector and %v beside it...\n",
			name, e.o.busySettle, e.o.busyPhase, e.o.busyPhase)
		row, err := measureBusyPhase(ctx, e, name, &load)
		if err != nil {
			return fmt.Errorf("phase %s: %w", name, err)
		}
		fmt.Println(row.line())
		if row.col != nil {
			fmt.Println(row.col.otlp.line())
		}
		if p := row.peer; p != nil {
			fmt.Printf("  peer: CPU %s, first %v %.2f%%, peak RSS %.1f MiB, RSS at end %.1f MiB, %d OTLP requests, host CPU beside it %.1f%%\n",
				fmtCPU(p.cpuTicks, p.cpuSched), busyStartupWindow, p.startup, mib(p.peakRSS), mib(p.endRSS), p.requests, p.host)
		}
		rows = append(rows, row)
		return nil
	}

	if err := phase(1, "1 idle host"); err != nil {
		return err
	}
	if selected[2] || selected[3] {
		if err := raiseLimits(busySleepers); err != nil {
			return err
		}
		if load.sleepers, err = startSleepers(busySleepers); err != nil {
			return err
		}
		load.renew = func() error {
			load.sleepers.kill()
			s, err := startSleepers(busySleepers)
			load.sleepers = s
			return err
		}
		if err := phase(2, fmt.Sprintf("2 + %d idle processes", busySleepers)); err != nil {
			return err
		}
		load.renew = nil
	}
	if selected[3] {
		load.pacer = startPacer(busyExecRate, "/bin/true")
		if err := phase(3, fmt.Sprintf("3 + %d execs/s", busyExecRate)); err != nil {
			return err
		}
		if n := load.pacer.skipped.Load(); n > 0 {
			fmt.Printf("pacer: %d runs skipped with %d execs in flight\n", n, pacerInFlight)
		}
	}
	load.stop()
	if !selected[4] {
		fmt.Println()
		printBusyTable(os.Stdout, rows, nil, nil)
		if e.o.busyPeer != "" {
			fmt.Println()
			printPeerTable(os.Stdout, rows, nil)
		}
		return nil
	}
	rs, notes, err := startRuntimes(e.dir, e.o.busyRuntimes)
	if err != nil {
		return err
	}
	load.runtimes = rs
	for _, n := range notes {
		fmt.Println("note: " + n)
	}
	fmt.Printf("runtimes: %s\n", strings.Join(rs.names(), ", "))
	name := "4 runtimes"
	if e.o.busyBurst {
		// Each profiler sees the runtimes start together, as a deploy.
		name = "4 runtimes started together"
		load.renew = func() error {
			load.runtimes.stop()
			rs, _, err := startRuntimes(e.dir, e.o.busyRuntimes)
			load.runtimes = rs
			return err
		}
	}
	if err := phase(4, name); err != nil {
		return err
	}
	var startup *busyStartup
	if !e.o.skipCollector {
		s, err := measureBusyStartup(ctx, e)
		if err != nil {
			return fmt.Errorf("start-up: %w", err)
		}
		startup = &s
		fmt.Printf("start-up with the runtimes running: collector CPU over its first %v: %.2f%% of a core, ready after %.1fs\n",
			busyStartupWindow, s.cpuTicks, s.ready.Seconds())
	}
	load.stop()
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	printBusyTable(os.Stdout, rows, startup, notes)
	fmt.Println()
	printOTLPTable(os.Stdout, rows)
	if e.o.busyPeer != "" {
		fmt.Println()
		printPeerTable(os.Stdout, rows, startup)
	}
	return nil
}

// parseBusyPhases parses -busy-phases: phase numbers 1 to 4, comma-separated.
func parseBusyPhases(flag string) (map[int]bool, error) {
	phases := map[int]bool{}
	for _, f := range strings.Split(flag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4 {
			return nil, fmt.Errorf("-busy-phases: %q is not a phase (1 to 4)", f)
		}
		phases[n] = true
	}
	return phases, nil
}

// measureBusyPhase measures the load running now without the collector,
// then beside a fresh one.
func measureBusyPhase(ctx context.Context, e env, name string, load *busyLoad) (busyRow, error) {
	row := busyRow{name: name}
	if err := waitWindow(ctx, e.o.busySettle, nil); err != nil {
		return row, err
	}
	h0, err := readHostCPU()
	if err != nil {
		return row, err
	}
	n0, start := load.pacer.count(), time.Now()
	if err := waitWindow(ctx, e.o.busyPhase, nil); err != nil {
		return row, err
	}
	h1, err := readHostCPU()
	if err != nil {
		return row, err
	}
	elapsed := time.Since(start)
	row.hostBase = hostPercent(h0, h1, elapsed)
	if load.pacer != nil {
		row.execBase = float64(load.pacer.count()-n0) / elapsed.Seconds()
	}
	if !e.o.skipCollector {
		f, err := measureBusyCollector(ctx, e, load.pacer, load.renew)
		if err != nil {
			return row, err
		}
		row.col = &f
		if !f.metrics {
			row.notes = append(row.notes, "the collector's metrics could not be scraped")
		}
	}
	if e.o.busyPeer != "" {
		p, err := measureBusyPeer(ctx, e, load.renew)
		if err != nil {
			return row, err
		}
		row.peer = &p
	}
	if load.runtimes != nil {
		row.notes = append(row.notes, load.runtimes.dead()...)
	}
	return row, nil
}

// busyCollectorConfig is the collector of the busy suite, its metrics on
// port: configured as the DaemonSet ships it (OTLP export alone, to the
// endpoint the caller sets), as a busy node runs it.
func busyCollectorConfig(e env, port int, settle time.Duration) collectorConfig {
	cfg := e.collector(profileConfig{cpuHz: 99, offCPU: !e.o.busyCPUOnly, minBlock: time.Millisecond,
		reportInterval: busyReportInterval, metricsPort: port, otlpOnly: true})
	cfg.settle = settle
	return cfg
}

// measureBusyCollector starts a collector, runs renew (if any) once it is
// ready, lets it settle and measures it over one phase.
func measureBusyCollector(ctx context.Context, e env, pacer *execPacer, renew func() error) (f busyFigures, err error) {
	port, err := freePort()
	if err != nil {
		return f, err
	}
	cfg := busyCollectorConfig(e, port, 0)
	sink, err := startOTLPSink()
	if err != nil {
		return f, err
	}
	defer sink.close()
	cfg.profile.otlpEndpoint = sink.addr
	c, err := startCollector(ctx, cfg)
	if err != nil {
		return f, err
	}
	defer func() {
		if stopErr := c.stop(); err == nil {
			err = stopErr
		}
	}()
	var renewCPU cpuSample
	var renewed time.Time
	if renew != nil {
		if renewCPU, err = readCPU(c.pid()); err != nil {
			return f, err
		}
		renewed = time.Now()
		if err := renew(); err != nil {
			return f, err
		}
	}
	if err := waitWindow(ctx, e.o.busySettle, c.exited); err != nil {
		return f, err
	}
	before, scrapeErr := scrapeProm(ctx, port)
	cpu0, err := readCPU(c.pid())
	if err != nil {
		return f, err
	}
	h0, err := readHostCPU()
	if err != nil {
		return f, err
	}
	n0, start, o0 := pacer.count(), time.Now(), sink.counts()
	sink.record(true)
	if err := waitWindow(ctx, e.o.busyPhase, c.exited); err != nil {
		return f, fmt.Errorf("%w; its last output (%s):\n%s", err, c.logPath, c.lastLines(20))
	}
	f.otlp = otlpWindow{counts: sink.counts().sub(o0), elapsed: time.Since(start), interval: busyReportInterval, events: sink.eventsSince(start), payloads: sink.payloads()}
	sink.record(false)
	cpu1, err := readCPU(c.pid())
	if err != nil {
		return f, err
	}
	h1, err := readHostCPU()
	if err != nil {
		return f, err
	}
	elapsed := time.Since(start)
	f.cpuTicks, f.cpuSched = cpuPercent(cpu0, cpu1, elapsed)
	if renew != nil {
		f.sinceRenew, _ = cpuPercent(renewCPU, cpu1, time.Since(renewed))
	}
	f.host = hostPercent(h0, h1, elapsed)
	if pacer != nil {
		f.execRate = float64(pacer.count()-n0) / elapsed.Seconds()
	}
	after, err := scrapeProm(ctx, port)
	if scrapeErr == nil && err == nil {
		f.metrics = true
		f.failed = promByLabel(after, "otelcol_bpfprofiler_unwind_tables_failed", "reason")
		f.walks = countsDelta(promByLabel(before, "otelcol_bpfprofiler_unwind_walks", "reason"),
			promByLabel(after, "otelcol_bpfprofiler_unwind_walks", "reason"))
		f.tables = promSum(after, "otelcol_bpfprofiler_unwind_tables")
		f.tableBytes = promSum(after, "otelcol_bpfprofiler_unwind_table_bytes")
	}
	if f.peakRSS, err = readVmHWM(c.pid()); err != nil {
		return f, err
	}
	if f.endRSS, err = readVmRSS(c.pid()); err != nil {
		return f, err
	}
	f.mapBytes, f.maps, err = bpfMapMemory(c.pid())
	return f, err
}

// busyStartup is a fresh collector's first busyStartupWindow.
type busyStartup struct {
	cpuTicks, cpuSched float64
	peakRSS, mapBytes  uint64
	ready              time.Duration // from start to readyMessage
}

// measureBusyStartup starts a collector and measures its CPU from its
// start to busyStartupWindow later.
func measureBusyStartup(ctx context.Context, e env) (s busyStartup, err error) {
	port, err := freePort()
	if err != nil {
		return s, err
	}
	cfg := busyCollectorConfig(e, port, 0)
	sink, err := startOTLPSink()
	if err != nil {
		return s, err
	}
	defer sink.close()
	cfg.profile.otlpEndpoint = sink.addr
	c, err := launchCollector(cfg)
	if err != nil {
		return s, err
	}
	defer func() {
		if stopErr := c.stop(); err == nil {
			err = stopErr
		}
	}()
	done := make(chan error, 1)
	go func() {
		if err := waitWindow(ctx, time.Until(c.started.Add(busyStartupWindow)), c.exited); err != nil {
			done <- err
			return
		}
		cpu, err := readCPU(c.pid())
		if err != nil {
			done <- err
			return
		}
		// The process is new: all its CPU time is in the window.
		s.cpuTicks, s.cpuSched = cpuPercent(cpuSample{}, cpu, time.Since(c.started))
		if cpu.schedNS > 0 {
			s.cpuSched = 100 * float64(cpu.schedNS) / 1e9 / time.Since(c.started).Seconds()
		}
		s.peakRSS, _ = readVmHWM(c.pid())
		s.mapBytes, _, _ = bpfMapMemory(c.pid())
		done <- nil
	}()
	readyErr := c.awaitReady(ctx, cfg)
	s.ready = time.Since(c.started)
	if err := <-done; err != nil {
		return s, err
	}
	return s, readyErr
}

// waitWindow waits d, unless ctx ends or exited (nil: never) closes first.
func waitWindow(ctx context.Context, d time.Duration, exited <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-exited:
		return fmt.Errorf("collector exited during the measurement")
	case <-t.C:
		return nil
	}
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
