package main

// Suite soak (issue 46, scenario 5): the collector as the DaemonSet runs it
// (deploy/kubernetes/configmap.yaml's configuration with off-CPU profiling
// too, OTLP to an in-process sink), inside a memory cgroup with the
// DaemonSet's limit and GOMEMLIMIT, for -soak-duration on a churning host:
// soakExecRate execs a second drawn from soakBinaries C programs rebuilt
// every -soak-rebuild with new build ids into fresh files (the old ones
// deleted), a few long-lived ones from each generation, and the busy
// suite's runtimes (node, two JVMs, CPythons, xz). Every -soak-interval it
// records the collector's RSS, Go heap, cgroup memory, BPF map memory (the
// unwind tables inside its arrays of maps included), CPU, the execs, its own
// table gauges and the cgroup's OOM kills into soak.csv under -soak-out,
// and at the end draws soak.png. It fails (exit 1) on an OOM kill, a
// collector that died, an exec rate 10% short, a bound passed or, in runs
// of 30 minutes or more, RSS or BPF memory growing 1 MiB/h or more after
// the first 10 minutes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

const (
	suiteSoak     = "soak"
	soakExecRate  = 100
	soakBinaries  = 50
	soakStopAfter = 15 * time.Second
	// soakExecsInFlight lets the execs keep their rate on a loaded host,
	// where each waits longer for a CPU (busy's pacer allows 8).
	soakExecsInFlight = 32
)

func runSoakSuite(ctx context.Context, e env) (err error) {
	o := e.o
	if o.soakDuration <= 0 || o.soakInterval <= 0 || o.soakRebuild <= 0 {
		return fmt.Errorf("-soak-duration, -soak-interval and -soak-rebuild must be positive")
	}
	out := o.soakOut
	if out == "" {
		out = e.dir
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	shipped, err := testutil.ReadShippedCollectorYAML(".")
	if err != nil {
		return fmt.Errorf("%w (run the bench from the repository's root)", err)
	}
	// The DaemonSet's memory limit and GOMEMLIMIT.
	ds, err := testutil.ReadDaemonSetMemory(".")
	if err != nil {
		return err
	}
	soakMemory := ds.Limit
	fmt.Printf("== suite soak: %v, %d execs/s from %d binaries rebuilt every %v, runtimes; collector in a memory cgroup of %d MiB, GOMEMLIMIT=%s ==\n",
		o.soakDuration, soakExecRate, soakBinaries, o.soakRebuild, soakMemory>>20, ds.GoMemLimit)
	port, err := freePort()
	if err != nil {
		return err
	}
	conf, err := soakCollectorYAML(shipped, port)
	if err != nil {
		return err
	}
	if err := raiseLimits(0); err != nil {
		return err
	}

	cg, err := testutil.NewMemoryCgroup(fmt.Sprintf("bpfprofiler-soak-%d", time.Now().UnixNano()), soakMemory)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cg.Remove(soakStopAfter)) }()
	fmt.Printf("memory cgroup: %s\n", cg.Dir)

	churn, err := startSoakChurn(ctx, e.dir, soakBinaries, o.soakRebuild)
	if err != nil {
		return err
	}
	defer churn.stop()
	rs, notes, err := startRuntimes(e.dir, o.soakRuntimes)
	if err != nil {
		return err
	}
	defer rs.stop()
	for _, n := range notes {
		fmt.Println("note: " + n)
	}
	fmt.Printf("runtimes: %s\n", strings.Join(rs.names(), ", "))
	pacer := startPacerOf(soakExecRate, soakExecsInFlight, churn.nextArgv)
	defer pacer.stop()

	sink, err := startOTLPSink()
	if err != nil {
		return err
	}
	defer sink.close()
	cfg := collectorConfig{binary: o.collector, dir: e.dir, readyTimeout: 60 * time.Second, yaml: conf, wrap: cg.Wrap,
		env: []string{"GOMEMLIMIT=" + ds.GoMemLimit, "OTLP_ENDPOINT=" + sink.addr}}
	c, err := launchCollector(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.stop() }() // stopped below; this is for early returns
	if err := c.awaitReady(ctx, cfg); err != nil {
		return err
	}

	csvFile, err := os.Create(filepath.Join(out, "soak.csv"))
	if err != nil {
		return err
	}
	defer csvFile.Close()
	table, err := newSoakCSV(csvFile)
	if err != nil {
		return err
	}
	probe := &soakProbe{pid: c.pid(), metricsPort: port, cgroup: cg, pacer: pacer, churn: churn,
		launched: c.started, start: time.Now(), execs0: pacer.count()}
	samples, sampleErr := sampleSoak(ctx, probe, table, c, o.soakDuration, o.soakInterval)

	outcome := soakOutcome{duration: o.soakDuration, execTarget: soakExecRate, memoryLimit: soakMemory, alive: sampleErr == nil}
	if sampleErr != nil {
		outcome.exitNote = sampleErr.Error()
	}
	if stopErr := c.stop(); stopErr != nil && outcome.alive {
		outcome.alive, outcome.exitNote = false, stopErr.Error()
	}
	outcome.cgroupPeak = cg.Peak()
	outcome.buildIDs, outcome.builds = churn.distinctBuildIDs()
	outcome.generations = int(outcome.builds) / soakBinaries
	if ctx.Err() != nil {
		return ctx.Err()
	}

	fmt.Printf("load at the end: %s; execs skipped with %d in flight: %d\n", loadAvg(), soakExecsInFlight, pacer.skipped.Load())
	for _, n := range rs.dead() {
		fmt.Println("note: " + n)
	}
	if msg := churn.lastError(); msg != "" {
		fmt.Println("note: a rebuild failed: " + msg)
	}
	fmt.Println()
	checks := judgeSoak(samples, outcome)
	printSoakFigures(os.Stdout, samples)
	fmt.Println()
	printSoakChecks(os.Stdout, checks)
	png := filepath.Join(out, "soak.png")
	title := fmt.Sprintf("bpfprofiler soak: %v, %d execs/s, %d binaries rebuilt every %v, runtimes; cgroup limit %d MiB",
		o.soakDuration, soakExecRate, soakBinaries, o.soakRebuild, soakMemory>>20)
	if err := drawSoakPNG(png, title, samples); err != nil {
		return fmt.Errorf("drawing %s: %w", png, err)
	}
	fmt.Printf("\nwrote %s and %s\n", csvFile.Name(), png)
	if !soakPassed(checks) {
		return fmt.Errorf("soak failed: see the checks above")
	}
	return nil
}

// sampleSoak samples the collector every interval for duration, writing
// each sample to table and printing one line a minute. It returns early,
// with an error, when the collector exits.
func sampleSoak(ctx context.Context, probe *soakProbe, table *soakCSV, c *collector, duration, interval time.Duration) ([]soakSample, error) {
	var samples []soakSample
	next := probe.start
	lastLine := time.Duration(-1)
	for {
		s, err := probe.read(ctx)
		if err != nil {
			return samples, fmt.Errorf("%w; its last output (%s):\n%s", err, c.logPath, c.lastLines(20))
		}
		samples = append(samples, s)
		if err := table.write(s); err != nil {
			return samples, err
		}
		if minute := s.at.Truncate(time.Minute); minute != lastLine {
			lastLine = minute
			fmt.Println(s.line())
		}
		if s.at >= duration {
			return samples, nil
		}
		next = next.Add(interval)
		if err := waitWindow(ctx, min(time.Until(next), time.Until(probe.start.Add(duration))), c.exited); err != nil {
			if ctx.Err() != nil {
				return samples, err
			}
			return samples, fmt.Errorf("%w (%v); its last output (%s):\n%s", err, c.waitErr, c.logPath, c.lastLines(20))
		}
	}
}

// line is s as a line of progress.
func (s soakSample) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1f min: RSS %.1f MiB, Go heap %.1f MiB, cgroup %.1f MiB (page cache %.1f, peak %.1f), BPF %.1f MiB (%d maps, %d tables %.1f MiB), CPU %.2f%%, %d execs (%.1f/s), build ids %d",
		s.at.Minutes(), mib(s.rss), mib(s.goHeap), mib(s.cgroup), mib(s.cgroupCache), mib(s.cgroupPeak), mib(s.bpf.total()), s.bpf.maps, s.bpf.inner, mib(s.bpf.innerByte),
		s.cpu, s.execs, s.execRate, s.buildIDs)
	if s.metricsOK {
		fmt.Fprintf(&b, ", unwind tables %.0f (%.1f MiB), python %.0f, jvm %.0f, v8 %.0f processes",
			s.unwindTables, s.unwindTableBytes/(1<<20), s.pythonProcs, s.jvmProcs, s.v8Procs)
	}
	if s.oomKills > 0 {
		fmt.Fprintf(&b, ", OOM KILLS %d", s.oomKills)
	}
	for _, e := range []string{s.scrapeErr, s.bpfErr} {
		if e != "" {
			b.WriteString("; " + e)
		}
	}
	return b.String()
}

// printSoakFigures prints each series' start, end, peak and mean, and the
// growth of the memory ones after the warm-up.
func printSoakFigures(w io.Writer, samples []soakSample) {
	if len(samples) == 0 {
		return
	}
	duration := samples[len(samples)-1].at
	from := soakWarmupFor(duration)
	fmt.Fprintf(w, "%d samples over %v; growth: least squares from minute %.1f on\n", len(samples), duration.Round(time.Second), from.Minutes())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| figure\t| start\t| end\t| peak\t| mean\t| growth\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|")
	bytesRow := func(name string, v func(soakSample) uint64) {
		f := func(s soakSample) float64 { return float64(v(s)) }
		first, last, peak, mean := soakStats(samples, f)
		fmt.Fprintf(tw, "| %s\t| %.1f MiB\t| %.1f MiB\t| %.1f MiB\t| %.1f MiB\t| %s\t|\n", name,
			first/(1<<20), last/(1<<20), peak/(1<<20), mean/(1<<20), soakGrowth(samples, from, f))
	}
	bytesRow("collector RSS", func(s soakSample) uint64 { return s.rss })
	bytesRow("Go heap", func(s soakSample) uint64 { return s.goHeap })
	bytesRow("cgroup memory", func(s soakSample) uint64 { return s.cgroup })
	bytesRow("cgroup page cache", func(s soakSample) uint64 { return s.cgroupCache })
	bytesRow("cgroup less page cache", func(s soakSample) uint64 { return s.cgroup - min(s.cgroup, s.cgroupCache) })
	bytesRow("BPF maps, all", func(s soakSample) uint64 { return s.bpf.total() })
	bytesRow("BPF maps, unwind tables", func(s soakSample) uint64 { return s.bpf.innerByte })
	countRow := func(name, unit string, f func(soakSample) float64) {
		first, last, peak, mean := soakStats(samples, f)
		fmt.Fprintf(tw, "| %s\t| %.1f%s\t| %.1f%s\t| %.1f%s\t| %.1f%s\t| -\t|\n", name, first, unit, last, unit, peak, unit, mean, unit)
	}
	countRow("collector CPU (% of a core)", "", func(s soakSample) float64 { return s.cpu })
	countRow("execs/s", "", func(s soakSample) float64 { return s.execRate })
	countRow("unwind tables (gauge)", "", func(s soakSample) float64 { return s.unwindTables })
	countRow("unwind table MiB (gauge)", "", func(s soakSample) float64 { return s.unwindTableBytes / (1 << 20) })
	countRow("BPF tables (maps)", "", func(s soakSample) float64 { return float64(s.bpf.inner) })
	tw.Flush()
}

// soakStats are the first, last, largest and mean values of f over the
// samples (the first sample's CPU, its start-up, left out of the mean).
func soakStats(samples []soakSample, f func(soakSample) float64) (first, last, peak, mean float64) {
	first, last = f(samples[0]), f(samples[len(samples)-1])
	peak = first
	for _, s := range samples {
		peak = max(peak, f(s))
	}
	rest := samples
	if len(rest) > 1 {
		rest = rest[1:]
	}
	for _, s := range rest {
		mean += f(s)
	}
	return first, last, peak, mean / float64(len(rest))
}

// printSoakChecks prints the judgement.
func printSoakChecks(w io.Writer, checks []soakCheck) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| check\t| measured\t| bound\t| result\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|")
	for _, c := range checks {
		result := "pass"
		switch {
		case !c.judged:
			result = "reported"
		case !c.ok:
			result = "FAIL"
		}
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %s\t|\n", c.name, c.measured, c.bound, result)
	}
	tw.Flush()
	if soakPassed(checks) {
		fmt.Fprintln(w, "soak: PASS")
	} else {
		fmt.Fprintln(w, "soak: FAIL")
	}
}
