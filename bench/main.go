// Command bench measures the overhead of the bpfprofiler collector against
// the workload alone and against perf, and prints a report (`make bench`). It
// asserts nothing: it exits 0 unless something failed to run. It has several
// suites (-suite cpu|unwind|python|java|node|ruby|php|offcpu|probes|usdt|readers|context|busy|startup|gateway|soak|all,
// default all), each but busy and gateway measured in several rounds.
//
// Each round runs every scenario of the suite once on a fixed amount of
// work, in an order rotated from round to round so that drift in the host's
// load spreads over all scenarios.
//
// Suite cpu (CPU sampling; workloads/fixedwork.c, two CPU-bound threads):
//
//   - baseline: the workload alone;
//   - perf: the workload under `perf record -F 99 -a -g`;
//   - bpfprofiler: the workload beside the collector, profiling the whole
//     host at 99 Hz per CPU, reporting every 2 s.
//
// Suite python (CPython; workloads/pyfixed.py, recursion in pure Python
// under -python, default pyenv's 3.12): the workload alone, under `perf
// record -F 99 -a -g` with the interpreter's perf maps (-X perf), and beside
// the collector with unwinding::method auto (Python frames) and
// frame_pointer.
//
// Suite java (HotSpot; workloads/JavaFixed.java, compiled Java calling
// through a method the JIT inlines, under -jdk, default Debian's OpenJDK
// 17, started with no flag): the workload alone, under `perf record -F 99
// -a -g` with what perf needs of a JVM (-XX:+PreserveFramePointer, a perf
// map at exit), and beside the collector with unwinding::method auto (Java
// frames walked in BPF) and frame_pointer.
//
// Suite node (Node.js; workloads/nodefixed.js, main → work → spin in
// JavaScript, under -node, default Debian's node 20, started with no flag):
// the workload alone, under `perf record -F 99 -a -g` with node's perf map
// (--perf-basic-prof; the map is removed afterwards), and beside the
// collector with unwinding::method auto and frame_pointer. The report gives
// the share of the workload's samples whose stack has spin ← work ← main.
//
// Suites ruby and php (workloads/rubyfixed.rb and phpfixed.php, fib(25)
// in pure Ruby or PHP, under Debian's Ruby -ruby-version or PHP CLI
// -php-version without opcache, unpacked as the tests do): the workload
// alone, and beside the collector with unwinding::method auto (Ruby or PHP
// frames walked in BPF) and frame_pointer (the CPU sampling alone, auto's
// peer). The report gives auto's slowdown and collector CPU as ratios to
// frame_pointer's in the same round.
//
// Suite offcpu (off-CPU profiling; workloads/pingpong.c, two threads on one
// CPU passing a byte back and forth through pipes, ~50k context switches/s):
//
//   - baseline: the workload alone;
//   - bpfprofiler off-CPU: beside the collector with off-CPU profiling only
//     (cpu disabled, off_cpu min_block -min-block, default 1ms), host-wide;
//   - perf sched_switch: under `perf record -e sched:sched_switch -a -g`, if
//     perf can open the tracepoint. It needs tracefs: if perf fails and
//     tracefs is not mounted, the bench mounts it once, and unmounts it after
//     the suite if it (or perf) mounted it. If perf still fails, the report
//     says "perf sched_switch: unavailable (<reason>)".
//
// Suite probes (uprobe duration probes; workloads/probeloop.c, one thread
// calling a tiny function -probe-calls times): the cost per probed call, see
// probes.go.
//
// Suite usdt (USDT probes): the cost per fired USDT probe against a symbol
// uprobe pair on one function (workloads/usdtloop.c), and PostgreSQL's
// pgbench select-only TPS beside the collector with and without the
// pg.query probe and its query text attribute, see usdt.go.
//
// Suite readers (the thread-context and Go-label readers alone, on the
// bench's own thread, through BPF_PROG_TEST_RUN): ns per read of what a
// process publishes, less the loop's, see readers.go.
//
// Suite context (workloads that publish an OpenTelemetry thread context,
// Go labels, or nothing; two of each at once): the CPU sampler's BPF run
// time per sample with the readers on and off, see context.go.
//
// Suite soak (soak.go; not in all) runs the collector as the DaemonSet
// does, inside its memory limit, for -soak-duration on a churning host, and
// fails when its memory grows or a bound is passed (`make soak`).
//
// Suite busy (a busy node in four phases, see busy.go) also gives the OTLP
// bytes per minute the collector's otlp_grpc exporter sends; suite startup
// (startup.go) how soon a process started under the collector is named
// whole, on an idle host and a busy one; suite gateway
// (gateway.go) replays a busy node's OTLP through a plain gateway collector
// and projects both to 10,000 nodes.
//
// The collector is started once per round, right before its scenario, and
// stopped with SIGTERM right after: it must not run during the baseline or
// perf runs (it profiles the whole host, so it would slow them down too), and
// restarting it per round keeps its state (caches, pprof history) from
// growing over the bench. Its start-up is not measured: the workload starts
// only after the collector has logged "Everything is ready" and a settle time
// longer than one report interval has passed. Its CPU time is measured over
// the workload's lifetime. Note that the BPF programs run in the context of
// the sampled or switching task: their cost shows as the workload's slowdown,
// not as collector CPU.
//
// The workloads report their own wall time (CLOCK_MONOTONIC around thread
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
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	suite      string
	rounds     int
	iterations uint64
	roundTrips uint64
	spin       uint64
	probeCalls uint64
	usdtCalls  uint64
	// The usdt suite's pgbench runs.
	pgbenchDuration time.Duration
	pgbenchClients  int
	goRequests      uint64
	pyIterations    uint64
	python          string
	jdk             string
	javaIterations  uint64
	node            string
	nodeIterations  uint64
	rubyVersion     string
	rubyIterations  uint64
	allocRounds     uint64
	phpVersion      string
	phpIterations   uint64
	minBlock        time.Duration
	mechanism       string
	collector       string
	skipPerf        bool
	skipCollector   bool
	skipIdle        bool
	idleWindow      time.Duration
	settle          time.Duration
	busyPhase       time.Duration
	busySettle      time.Duration
	busyRuntimes    string
	busyPhases      string
	busyPeer        string
	busyPeerReady   string
	busyBurst       bool
	busyCPUOnly     bool
	startupWindow   time.Duration
	keep            bool
	// The gateway suite (gateway.go).
	gateway            string
	gatewayNodes       string
	gatewayStep        time.Duration
	gatewayPayloads    string
	gatewayCompression string
	// The soak suite (soak.go).
	soakDuration time.Duration
	soakInterval time.Duration
	soakRebuild  time.Duration
	soakOut      string
	soakRuntimes string
}

func main() {
	var o options
	flag.StringVar(&o.suite, "suite", suiteAll, "suite to run: cpu (CPU sampling), unwind (CPU sampling of code without frame pointers), python (CPython), java (HotSpot), node (Node.js), ruby (CRuby), php (PHP), offcpu (off-CPU), probes (uprobe duration probes), usdt (USDT probes: per fire, and pgbench), context (what reading thread contexts and Go labels costs a sample), busy (a busy node), startup (how soon a new process is named), gateway (an OTLP gateway for many busy nodes), soak (the DaemonSet's collector on a churning host, in its memory limit, -soak-duration) or all")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each runs every scenario of a suite once")
	flag.Uint64Var(&o.iterations, "iterations", 5600000, "cpu suite: workload loop turns per thread (the default takes ~4 s on an idle 2-CPU VM)")
	flag.Uint64Var(&o.roundTrips, "round-trips", 100000, "offcpu suite: pipe round trips (the default takes ~4 s on an idle 2-CPU VM)")
	flag.Uint64Var(&o.spin, "spin", 17000, "offcpu suite: work per round trip (the default paces ~50k context switches/s)")
	flag.Uint64Var(&o.probeCalls, "probe-calls", 200000, "probes suite: calls of the probed function per run")
	flag.Uint64Var(&o.usdtCalls, "usdt-calls", 100000, "usdt suite: calls of the probed function per run")
	flag.DurationVar(&o.pgbenchDuration, "pgbench-duration", 5*time.Second, "usdt suite: how long each pgbench run lasts (whole seconds)")
	flag.IntVar(&o.pgbenchClients, "pgbench-clients", 2, "usdt suite: pgbench's clients (and threads)")
	flag.Uint64Var(&o.goRequests, "go-requests", 20000, "probes suite: requests to the Go server per run")
	flag.Uint64Var(&o.pyIterations, "py-iterations", 500, "python suite: fib(25) calls per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.StringVar(&o.python, "python", "/root/.pyenv/versions/3.12.1/bin/python", "python suite: the CPython interpreter (3.12+ for perf's -X perf)")
	flag.StringVar(&o.jdk, "jdk", "/usr/lib/jvm/java-17-openjdk-amd64", "java suite: the JDK whose java runs the workload")
	flag.Uint64Var(&o.javaIterations, "java-iterations", 400, "java suite: work(10000) calls per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.StringVar(&o.node, "node", "/usr/bin/node", "node suite: the node binary that runs the workload")
	flag.Uint64Var(&o.nodeIterations, "node-iterations", 140, "node suite: spin(1e6) calls per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.StringVar(&o.rubyVersion, "ruby-version", "3.3", "ruby suite: the Debian Ruby that runs the workload (3.1 or 3.3, unpacked as the tests do)")
	flag.Uint64Var(&o.allocRounds, "alloc-rounds", 2_500_000, "memory suite: allocations per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.Uint64Var(&o.rubyIterations, "ruby-iterations", 600, "ruby suite: fib(25) calls per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.StringVar(&o.phpVersion, "php-version", "8.4", "php suite: the Debian PHP CLI that runs the workload (8.2 or 8.4, unpacked as the tests do; no opcache)")
	flag.Uint64Var(&o.phpIterations, "php-iterations", 900, "php suite: fib(25) calls per run (the default takes ~4 s on an idle 2-CPU VM)")
	flag.DurationVar(&o.minBlock, "min-block", time.Millisecond, "offcpu suite: the collector's off_cpu min_block")
	flag.StringVar(&o.mechanism, "offcpu-mechanism", "auto", "offcpu suite: the collector's off_cpu mechanism (auto, task_work or switch_out)")
	flag.StringVar(&o.collector, "collector", os.Getenv("BPFPROFILER_COLLECTOR"), "collector binary (default $BPFPROFILER_COLLECTOR)")
	flag.BoolVar(&o.skipPerf, "skip-perf", false, "do not run the perf record scenarios")
	flag.BoolVar(&o.skipCollector, "skip-collector", false, "do not run the collector scenarios")
	flag.BoolVar(&o.skipIdle, "skip-idle", false, "cpu suite: do not measure the collector's idle CPU")
	flag.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "window of the idle CPU measurement")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "wait after the collector is ready before measuring (more than one report interval)")
	flag.DurationVar(&o.busyPhase, "busy-phase", 30*time.Second, "busy suite: how long each phase is measured")
	flag.DurationVar(&o.busySettle, "busy-settle", 12*time.Second, "busy suite: wait after a phase's load starts, and after the collector is ready, before measuring (more than its 10s report interval)")
	flag.StringVar(&o.busyRuntimes, "busy-runtimes", "", "busy suite: the runtimes of phase 4, comma-separated parts of their names (node, openjdk, temurin, python 3.12, xz); empty: all")
	flag.StringVar(&o.busyPhases, "busy-phases", "1,2,3,4", "busy suite: the phases measured, comma-separated (the load of a phase left out is still set up when a later phase needs it; the start-up figure comes with phase 4)")
	flag.StringVar(&o.busyPeer, "busy-peer", "", "busy suite: another profiler's command line (split at spaces; "+peerOTLP+" stands for an OTLP gRPC sink's host:port), measured in each phase after the collector, on the same load, e.g. the OpenTelemetry eBPF profiler built under /tmp")
	flag.StringVar(&o.busyPeerReady, "busy-peer-ready", "", "busy suite: what the peer prints once it profiles (the OpenTelemetry eBPF profiler: \"Attached sched monitor\"); when set, -busy-burst renews the runtimes once it is printed and the settle counts from then, as for the collector; empty: at the peer's start")
	flag.BoolVar(&o.busyCPUOnly, "busy-cpu-only", false, "busy suite: the collector samples CPU only (no off_cpu), as a peer without off-CPU profiling does")
	flag.BoolVar(&o.busyBurst, "busy-burst", false, "busy suite: phase 4's runtimes are started again, together, once each profiler is ready, and measured from -busy-settle after (a deploy)")
	flag.DurationVar(&o.startupWindow, "startup-window", 10*time.Second, "startup suite: how long each workload runs under the collector")
	flag.StringVar(&o.gateway, "gateway", os.Getenv("BPFPROFILER_GATEWAY"), "gateway suite: the plain collector built from bench/gateway-builder.yaml (default $BPFPROFILER_GATEWAY)")
	flag.StringVar(&o.gatewayNodes, "gateway-nodes", "50,100,200,400,800,1600", "gateway suite: node equivalents replayed, in increasing steps (one request per node per 10 s)")
	flag.DurationVar(&o.gatewayStep, "gateway-step", 20*time.Second, "gateway suite: how long each step replays")
	flag.StringVar(&o.gatewayPayloads, "gateway-payloads", "", "gateway suite: replay the *.pb files of this directory (e.g. otlp-payloads of a kept scratch directory) instead of capturing a busy node")
	flag.StringVar(&o.gatewayCompression, "gateway-compression", "", "gateway suite: the gateway exporter's compression, none or gzip (default: the exporter's, gzip; the bench's sink decodes no other)")
	flag.DurationVar(&o.soakDuration, "soak-duration", time.Hour, "soak suite: how long the collector is sampled (growth is judged from 30m on)")
	flag.DurationVar(&o.soakInterval, "soak-interval", 10*time.Second, "soak suite: time between samples")
	flag.DurationVar(&o.soakRebuild, "soak-rebuild", time.Minute, "soak suite: how often the churning binaries are rebuilt with new build ids")
	flag.StringVar(&o.soakOut, "soak-out", "", "soak suite: directory for soak.csv and soak.png (default: the scratch directory, kept with -keep)")
	flag.StringVar(&o.soakRuntimes, "soak-runtimes", "", "soak suite: the runtimes run, as -busy-runtimes; empty: all")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (workloads, collector configs and logs)")
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

func run(ctx context.Context, o options) (err error) {
	if o.rounds < 1 || o.iterations < 1 || o.roundTrips < 1 || o.spin < 1 || o.probeCalls < 1 || o.goRequests < 1 || o.pyIterations < 1 || o.nodeIterations < 1 ||
		o.rubyIterations < 1 || o.phpIterations < 1 || o.usdtCalls < 1 || o.pgbenchClients < 1 || o.pgbenchDuration < time.Second {
		return fmt.Errorf("-rounds, -iterations, -round-trips, -spin, -probe-calls, -py-iterations, -node-iterations, -ruby-iterations, -php-iterations, -usdt-calls and -pgbench-clients must be positive, -pgbench-duration at least 1s")
	}
	if o.minBlock < 0 {
		return fmt.Errorf("-min-block must not be negative")
	}
	if o.busyPhase <= 0 || o.busySettle < 0 {
		return fmt.Errorf("-busy-phase must be positive and -busy-settle not negative")
	}
	if _, err := parseBusyPhases(o.busyPhases); err != nil {
		return err
	}
	suites, err := selectSuites(o.suite)
	if err != nil {
		return err
	}
	if slices.Equal(suites, []string{suiteBusy}) || slices.Equal(suites, []string{suiteGateway}) || slices.Equal(suites, []string{suiteContext}) ||
		slices.Equal(suites, []string{suiteReaders}) || slices.Equal(suites, []string{suiteStartup}) || slices.Equal(suites, []string{suiteSoak}) ||
		slices.Equal(suites, []string{suiteUSDT}) {
		o.skipPerf = true // the busy, gateway, context, readers, startup, soak and usdt suites do not run perf
	}
	if o.skipCollector && slices.Contains(suites, suiteSoak) {
		return fmt.Errorf("the soak suite measures the collector: -skip-collector does not apply")
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

	fmt.Printf("bpfprofiler bench: suites %s, %d rounds, %d CPUs, kernel %s, load %s\n",
		strings.Join(suites, ", "), o.rounds, runtime.NumCPU(), kernelRelease(), loadAvg())
	if !o.skipCollector {
		fmt.Printf("collector: %s\n", o.collector)
	}
	e := env{o: o, dir: dir, perf: perf}
	for i, name := range suites {
		if i > 0 {
			fmt.Println()
		}
		if err := runNamedSuite(ctx, e, name); err != nil {
			return fmt.Errorf("suite %s: %w", name, err)
		}
	}
	return nil
}

// runNamedSuite sets up suite name, runs it and undoes its setup.
func runNamedSuite(ctx context.Context, e env, name string) error {
	var s *suite
	cleanup := func() {}
	var err error
	switch name {
	case suiteCPU:
		s, err = newCPUSuite(ctx, e)
	case suiteUnwind:
		s, err = newUnwindSuite(ctx, e)
	case suitePython:
		s, err = newPythonSuite(ctx, e)
	case suiteJava:
		s, err = newJavaSuite(ctx, e)
	case suiteNode:
		s, err = newNodeSuite(ctx, e)
	case suiteRuby:
		s, err = newRubySuite(ctx, e)
	case suitePHP:
		s, err = newPHPSuite(ctx, e)
	case suiteMemory:
		s, err = newMemorySuite(ctx, e)
	case suiteOffCPU:
		s, cleanup, err = newOffCPUSuite(ctx, e)
	case suiteProbes:
		return runProbesSuite(ctx, e)
	case suiteUSDT:
		return runUSDTSuite(ctx, e)
	case suiteBusy:
		return runBusySuite(ctx, e)
	case suiteStartup:
		return runStartupSuite(ctx, e)
	case suiteContext:
		return runContextSuite(ctx, e)
	case suiteReaders:
		return runReadersSuite(ctx, e)
	case suiteGateway:
		return runGatewaySuite(ctx, e)
	case suiteSoak:
		return runSoakSuite(ctx, e)
	}
	defer cleanup()
	if err != nil {
		return err
	}
	return runSuite(ctx, s, e.o.rounds, e.o.idleWindow)
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
