// Command bench measures the overhead of the bpfprofiler collector against
// the workload alone and against `perf record -F 99 -a -g`, in one run of
// several rounds, and prints a report (`make bench`). It asserts nothing: it
// exits 0 unless something failed to run.
//
// Each round runs every scenario once on a fixed amount of work
// (workloads/fixedwork.c, two threads), in an order rotated from round to
// round so that drift in the host's load spreads over all scenarios:
//
//   - baseline: the workload alone;
//   - perf: the workload under `perf record -F 99 -a -g`;
//   - bpfprofiler: the workload beside the collector, profiling the whole
//     host at 99 Hz per CPU, reporting every 2 s.
//
// The collector is started once per round, right before its scenario, and
// stopped with SIGTERM right after: it must not run during the baseline or
// perf runs (it profiles the whole host, so it would slow them down too), and
// restarting it per round keeps its state (caches, pprof history) from
// growing over the bench. Its start-up is not measured: the workload starts
// only after the collector has logged "Everything is ready" and a settle time
// longer than one report interval has passed. Its CPU time is measured over
// the workload's lifetime. Note that the BPF program itself runs in the
// sampled task's context: its cost shows as the workload's slowdown, not as
// collector CPU.
//
// The workload reports its own wall time (CLOCK_MONOTONIC around thread
// creation and join), so perf's and the collector's start-up and shut-down
// are not counted. Ratios are medians of per-round ratios to that round's
// baseline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type options struct {
	rounds        int
	iterations    uint64
	collector     string
	skipPerf      bool
	skipCollector bool
	skipIdle      bool
	idleWindow    time.Duration
	settle        time.Duration
	keep          bool
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each runs every scenario once")
	flag.Uint64Var(&o.iterations, "iterations", 5600000, "workload loop turns per thread (the default takes ~4 s on an idle 2-CPU VM)")
	flag.StringVar(&o.collector, "collector", os.Getenv("BPFPROFILER_COLLECTOR"), "collector binary (default $BPFPROFILER_COLLECTOR)")
	flag.BoolVar(&o.skipPerf, "skip-perf", false, "do not run the perf record scenario")
	flag.BoolVar(&o.skipCollector, "skip-collector", false, "do not run the collector scenarios")
	flag.BoolVar(&o.skipIdle, "skip-idle", false, "do not measure the collector's idle CPU")
	flag.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "window of the idle CPU measurement")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "wait after the collector is ready before measuring (more than one report interval)")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (workload, collector config and logs)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// scenario names, also the order of the first round.
const (
	scBaseline    = "baseline"
	scPerf        = "perf -F99 -a -g"
	scBpfprofiler = "bpfprofiler 99Hz"
)

func run(ctx context.Context, o options) (err error) {
	if o.rounds < 1 || o.iterations < 1 {
		return fmt.Errorf("-rounds and -iterations must be positive")
	}
	perf, err := preflight(&o)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "bpfprofiler-bench-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep || err != nil {
			fmt.Fprintf(os.Stderr, "bench: scratch directory kept: %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	bin, err := buildWorkload(ctx, dir)
	if err != nil {
		return err
	}
	cfg := collectorConfig{binary: o.collector, dir: dir, readyTimeout: 60 * time.Second, settle: o.settle}

	scenarios := []string{scBaseline}
	if !o.skipPerf {
		scenarios = append(scenarios, scPerf)
	}
	if !o.skipCollector {
		scenarios = append(scenarios, scBpfprofiler)
	}
	fmt.Printf("bpfprofiler bench: %d rounds, %d iterations x 2 threads, %d CPUs, kernel %s, load %s\n",
		o.rounds, o.iterations, runtime.NumCPU(), kernelRelease(), loadAvg())
	if !o.skipCollector {
		fmt.Printf("collector: %s\n", o.collector)
	}

	rep := newReport(scenarios)
	if !o.skipCollector && !o.skipIdle {
		fmt.Printf("measuring the collector's idle CPU over %v...\n", o.idleWindow)
		ticks, sched, err := measureIdle(ctx, cfg, o.idleWindow)
		if err != nil {
			return fmt.Errorf("idle measurement: %w", err)
		}
		rep.idleTicks, rep.idleSched, rep.haveIdle = ticks, sched, true
		fmt.Printf("idle: collector CPU over %v: %s of a core\n", o.idleWindow, fmtCPU(ticks, sched))
	}

	for r := range o.rounds {
		order := append(append([]string{}, scenarios[r%len(scenarios):]...), scenarios[:r%len(scenarios)]...)
		round := map[string]runResult{}
		var cr collectorRun
		for _, sc := range order {
			var res runResult
			var err error
			switch sc {
			case scBaseline:
				res, err = runBaseline(ctx, bin, o.iterations)
			case scPerf:
				res, err = runPerf(ctx, perf, dir, bin, o.iterations)
			case scBpfprofiler:
				cr, err = runWithCollector(ctx, cfg, bin, o.iterations)
				res = cr.runResult
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, sc, err)
			}
			round[sc] = res
			// Let perf's post-processing or the collector's exit settle.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
		rep.add(round, cr, !o.skipCollector)
		fmt.Println(rep.roundLine(r, o.rounds, order))
	}

	fmt.Printf("load at the end: %s\n\n", loadAvg())
	rep.print(os.Stdout)
	return nil
}

// preflight checks the tools each scenario needs before anything runs, and
// returns the path of perf (empty with -skip-perf).
func preflight(o *options) (perf string, err error) {
	var errs []error
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: warning: not root; perf -a and the collector need root (or CAP_PERFMON, CAP_BPF, ...)")
	}
	if !o.skipPerf {
		if perf, err = exec.LookPath("perf"); err != nil {
			errs = append(errs, fmt.Errorf("perf not found in PATH (install linux-perf, or pass -skip-perf)"))
		}
	}
	if !o.skipCollector {
		switch fi, err := os.Stat(o.collector); {
		case o.collector == "":
			errs = append(errs, fmt.Errorf("no collector binary: pass -collector or set BPFPROFILER_COLLECTOR (`make bench` builds and sets it), or pass -skip-collector"))
		case err != nil:
			errs = append(errs, fmt.Errorf("collector binary %s: %w (build it with `make collector`, or pass -skip-collector)", o.collector, err))
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Errorf("collector binary %s is not an executable file", o.collector))
		}
	}
	return perf, errors.Join(errs...)
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
