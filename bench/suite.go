package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Scenario names. Every suite's first scenario is scBaseline.
const (
	scBaseline    = "baseline"
	scPerf        = "perf -F99 -a -g"
	scBpfprofiler = "bpfprofiler 99Hz"
	scPerfSwitch  = "perf sched_switch -a -g"
	scOffCPU      = "bpfprofiler off-CPU"
	scOffCPUFP    = "bpfprofiler off-CPU frame_pointer"
	scPerfDwarf   = "perf -F99 -a --call-graph dwarf"
	scFramePtr    = "bpfprofiler frame_pointer"
	scUnwindAuto  = "bpfprofiler auto"
	scPerfPython  = "perf -F99 -a -g, python -X perf"
	scPerfJava    = "perf -F99 -a -g, java with frame pointers and a perf map"
	scPerfNode    = "perf -F99 -a -g, node --perf-basic-prof"
)

// Suite names, as -suite takes them.
const (
	suiteCPU     = "cpu"
	suiteOffCPU  = "offcpu"
	suiteProbes  = "probes"
	suiteUSDT    = "usdt"
	suiteUnwind  = "unwind"
	suitePython  = "python"
	suiteJava    = "java"
	suiteNode    = "node"
	suiteRuby    = "ruby"
	suitePHP     = "php"
	suiteMemory  = "memory"
	suiteBusy    = "busy"
	suiteStartup = "startup"
	suiteAll     = "all"
)

// selectSuites turns the -suite flag into the suites to run, in order.
func selectSuites(flag string) ([]string, error) {
	switch flag {
	case suiteCPU, suiteOffCPU, suiteProbes, suiteUSDT, suiteUnwind, suitePython, suiteJava, suiteNode, suiteRuby, suitePHP, suiteMemory, suiteBusy, suiteStartup, suiteGateway, suiteContext, suiteReaders, suiteSoak:
		return []string{flag}, nil
	case suiteAll:
		return []string{suiteCPU, suiteUnwind, suitePython, suiteJava, suiteNode, suiteRuby, suitePHP, suiteMemory, suiteOffCPU, suiteProbes, suiteUSDT, suiteReaders, suiteContext, suiteBusy, suiteStartup, suiteGateway}, nil
	}
	return nil, fmt.Errorf("-suite must be %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s or %s, not %q",
		suiteCPU, suiteUnwind, suitePython, suiteJava, suiteNode, suiteRuby, suitePHP, suiteMemory, suiteOffCPU, suiteProbes, suiteUSDT, suiteReaders, suiteContext, suiteBusy, suiteStartup, suiteGateway, suiteSoak, suiteAll, flag)
}

// scenario is one way of running a suite's workload. run returns the
// collector's figures when the collector ran beside the workload.
type scenario struct {
	name string
	run  func(ctx context.Context) (runResult, *collectorRun, error)
}

// suite is a workload measured under several scenarios, in rounds.
type suite struct {
	title     string           // printed before the rounds
	scenarios []scenario       // scenarios[0] is the baseline
	idle      *collectorConfig // measure the collector's idle CPU with it first (nil: don't)
	rep       *report
}

// rotated returns names rotated left by r (mod len), the order of round r:
// drift in the host's load then spreads over all scenarios.
func rotated[T any](names []T, r int) []T {
	if len(names) == 0 {
		return nil
	}
	k := r % len(names)
	return append(append([]T{}, names[k:]...), names[:k]...)
}

// runSuite runs s for the given number of rounds and prints its report.
func runSuite(ctx context.Context, s *suite, rounds int, idleWindow time.Duration) error {
	fmt.Println(s.title)
	if s.idle != nil {
		fmt.Printf("measuring the collector's idle CPU over %v...\n", idleWindow)
		ticks, sched, err := measureIdle(ctx, *s.idle, idleWindow)
		if err != nil {
			return fmt.Errorf("idle measurement: %w", err)
		}
		s.rep.idleTicks, s.rep.idleSched, s.rep.haveIdle = ticks, sched, true
		fmt.Printf("idle: collector CPU over %v: %s of a core\n", idleWindow, fmtCPU(ticks, sched))
	}
	for r := range rounds {
		order := rotated(s.scenarios, r)
		round := map[string]runResult{}
		var cr *collectorRun
		for _, sc := range order {
			res, c, err := sc.run(ctx)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, sc.name, err)
			}
			round[sc.name] = res
			if c != nil {
				s.rep.addCollectorCPU(sc.name, c)
				s.rep.addDepth(sc.name, c.depth)
				s.rep.addChain(sc.name, c.chain)
				if sc.name == s.rep.collectorSc {
					cr = c
				}
			}
			// Let perf's post-processing or the collector's exit settle.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
		s.rep.add(round, cr)
		fmt.Println(s.rep.roundLine(r, rounds, scenarioNames(order)))
	}
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	s.rep.print(os.Stdout)
	return nil
}

// env is what every suite shares.
type env struct {
	o    options
	dir  string // scratch directory
	perf string // perf's path ("" with -skip-perf)
}

func (e env) collector(p profileConfig) collectorConfig {
	return collectorConfig{binary: e.o.collector, dir: e.dir, readyTimeout: 60 * time.Second, settle: e.o.settle, profile: p}
}

func baselineScenario(w workload) scenario {
	return scenario{scBaseline, func(ctx context.Context) (runResult, *collectorRun, error) {
		res, err := runBaseline(ctx, w)
		return res, nil, err
	}}
}

func perfScenario(name string, e env, args []string, w workload) scenario {
	return scenario{name, func(ctx context.Context) (runResult, *collectorRun, error) {
		res, err := runPerf(ctx, e.perf, args, e.dir, w)
		return res, nil, err
	}}
}

func collectorScenario(name string, cfg collectorConfig, w workload, marker string) scenario {
	return scenario{name, func(ctx context.Context) (runResult, *collectorRun, error) {
		cr, err := runWithCollector(ctx, cfg, w, marker)
		if err != nil {
			return runResult{}, nil, err
		}
		return cr.runResult, &cr, nil
	}}
}

// newCPUSuite is the CPU-sampling suite: fixedwork (two CPU-bound threads)
// alone, under `perf record -F 99 -a -g` and beside the collector sampling
// the host at 99 Hz.
func newCPUSuite(ctx context.Context, e env) (*suite, error) {
	bin, err := buildWorkload(ctx, e.dir, "fixedwork", fixedworkSource)
	if err != nil {
		return nil, err
	}
	w := workload{name: "fixedwork", bin: bin, args: []string{strconv.FormatUint(e.o.iterations, 10)}}
	const marker = "work_hot"
	s := &suite{
		title:     fmt.Sprintf("== suite cpu: fixedwork, %d iterations x 2 threads ==", e.o.iterations),
		scenarios: []scenario{baselineScenario(w)},
	}
	if !e.o.skipPerf {
		s.scenarios = append(s.scenarios, perfScenario(scPerf, e, []string{"-F", "99", "-a", "-g"}, w))
	}
	collectorSc := ""
	if !e.o.skipCollector {
		cfg := e.collector(profileConfig{cpuHz: 99})
		s.scenarios = append(s.scenarios, collectorScenario(scBpfprofiler, cfg, w, marker))
		collectorSc = scBpfprofiler
		if !e.o.skipIdle {
			s.idle = &cfg
		}
	}
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, marker, cpuChecks)
	return s, nil
}

// newUnwindSuite is the unwinding suite: fixedwork built without frame
// pointers alone, under `perf record -F 99 -a --call-graph dwarf`, and beside
// the collector sampling the host at 99 Hz with unwinding::method
// frame_pointer and auto (whose CPU and RSS the report gives).
func newUnwindSuite(ctx context.Context, e env) (*suite, error) {
	bin, err := buildWorkload(ctx, e.dir, "fixedwork", fixedworkSource, "-fomit-frame-pointer")
	if err != nil {
		return nil, err
	}
	w := workload{name: "fixedwork", bin: bin, args: []string{strconv.FormatUint(e.o.iterations, 10)}}
	const marker = "work_hot"
	s := &suite{
		title:     fmt.Sprintf("== suite unwind: fixedwork without frame pointers, %d iterations x 2 threads ==", e.o.iterations),
		scenarios: []scenario{baselineScenario(w)},
	}
	if !e.o.skipPerf {
		s.scenarios = append(s.scenarios, perfScenario(scPerfDwarf, e, []string{"-F", "99", "-a", "--call-graph", "dwarf"}, w))
	}
	collectorSc := s.addUnwindingScenarios(e, w, marker)
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, marker, unwindChecks)
	return s, nil
}

// newPythonSuite is the Python suite: pyfixed.py (pure-Python recursion)
// under CPython alone, under `perf record -F 99 -a -g` with the interpreter's
// own perf maps (-X perf, 3.12+), and beside the collector sampling the host
// at 99 Hz with unwinding::method auto (Python frames read in BPF) and
// frame_pointer (none).
func newPythonSuite(ctx context.Context, e env) (*suite, error) {
	script := filepath.Join(e.dir, "pyfixed.py")
	if err := os.WriteFile(script, pyfixedSource, 0o644); err != nil {
		return nil, err
	}
	w := workload{name: "pyfixed", bin: e.o.python, args: []string{script, strconv.FormatUint(e.o.pyIterations, 10)}}
	const marker = "fib"
	s := &suite{
		title:     fmt.Sprintf("== suite python: pyfixed.py under %s, %d x fib(25) ==", e.o.python, e.o.pyIterations),
		scenarios: []scenario{baselineScenario(w)},
	}
	if !e.o.skipPerf {
		withMaps := w
		withMaps.args = append([]string{"-X", "perf"}, w.args...)
		s.scenarios = append(s.scenarios, perfScenario(scPerfPython, e, []string{"-F", "99", "-a", "-g"}, withMaps))
	}
	collectorSc := s.addUnwindingScenarios(e, w, marker)
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, marker, pythonChecks)
	return s, nil
}

// newJavaSuite is the Java suite: JavaFixed.java (compiled Java calling
// through an inlined method) under HotSpot with no flag alone, under `perf
// record -F 99 -a -g` with what perf needs of a JVM (frame pointers kept in
// compiled code, a perf map written at exit), and beside the collector
// sampling the host at 99 Hz with unwinding::method auto (Java frames
// walked in BPF) and frame_pointer.
func newJavaSuite(ctx context.Context, e env) (*suite, error) {
	src := filepath.Join(e.dir, "JavaFixed.java")
	if err := os.WriteFile(src, javafixedSource, 0o644); err != nil {
		return nil, err
	}
	// burn stays a call of its own: the samples show step inlined above it.
	w := workload{name: "javafixed", bin: filepath.Join(e.o.jdk, "bin", "java"),
		args: []string{"-Xmx64m", "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,JavaFixed::burn", src, strconv.FormatUint(e.o.javaIterations, 10)}}
	const marker = "JavaFixed.burn"
	s := &suite{
		title:     fmt.Sprintf("== suite java: JavaFixed.java under %s, %d x work(10000) ==", e.o.jdk, e.o.javaIterations),
		scenarios: []scenario{baselineScenario(w)},
	}
	if !e.o.skipPerf {
		withMaps := w
		withMaps.args = append([]string{"-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"}, w.args...)
		s.scenarios = append(s.scenarios, perfScenario(scPerfJava, e, []string{"-F", "99", "-a", "-g"}, withMaps))
	}
	collectorSc := s.addUnwindingScenarios(e, w, marker)
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, marker, javaChecks)
	return s, nil
}

// newNodeSuite is the Node.js suite: nodefixed.js (main → work → spin,
// float math in spin) under node with no flag alone, under `perf record -F
// 99 -a -g` with node's perf map (--perf-basic-prof, removed afterwards),
// and beside the collector sampling the host at 99 Hz with unwinding::method
// auto (JavaScript frames, once a V8 walker names them) and frame_pointer
// (the CPU sampling alone, the reference of auto's slowdown).
func newNodeSuite(ctx context.Context, e env) (*suite, error) {
	script := filepath.Join(e.dir, "nodefixed.js")
	if err := os.WriteFile(script, nodefixedSource, 0o644); err != nil {
		return nil, err
	}
	// Run in the scratch directory: with --perf-basic-prof node also writes
	// an isolate-*-v8.log to its working directory.
	w := workload{name: "nodefixed", bin: e.o.node, args: []string{script, strconv.FormatUint(e.o.nodeIterations, 10)},
		dir: e.dir, chain: nodeChain}
	s := &suite{
		title:     fmt.Sprintf("== suite node: nodefixed.js under %s, %d x spin(1e6) ==", e.o.node, e.o.nodeIterations),
		scenarios: []scenario{baselineScenario(w)},
	}
	if !e.o.skipPerf {
		withMap := w
		withMap.args = append([]string{"--perf-basic-prof"}, w.args...)
		s.scenarios = append(s.scenarios, scenario{scPerfNode, func(ctx context.Context) (runResult, *collectorRun, error) {
			res, err := runPerf(ctx, e.perf, []string{"-F", "99", "-a", "-g"}, e.dir, withMap)
			if res.pid > 0 {
				os.Remove(fmt.Sprintf("/tmp/perf-%d.map", res.pid))
			}
			return res, nil, err
		}})
	}
	collectorSc := s.addUnwindingScenarios(e, w, nodeChain[0])
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, "samples of the workload's pid", nodeChecks)
	return s, nil
}

// newOffCPUSuite is the off-CPU suite: pingpong (two threads switching
// ~50k times a second) alone, beside the collector with only off-CPU
// profiling on (unwinding auto, and frame_pointer: with switch_out every
// switch-out walks the stack, with the tables or frame pointers), and under `perf record -e sched:sched_switch -a -g` when perf
// can open that tracepoint. The returned cleanup undoes a tracefs mount the
// probe for perf caused; call it after the suite.
func newOffCPUSuite(ctx context.Context, e env) (s *suite, cleanup func(), err error) {
	cleanup = func() {}
	bin, err := buildWorkload(ctx, e.dir, "pingpong", pingpongSource)
	if err != nil {
		return nil, cleanup, err
	}
	w := workload{name: "pingpong", bin: bin, args: []string{
		strconv.FormatUint(e.o.roundTrips, 10), strconv.FormatUint(e.o.spin, 10)}}
	const marker = "pingpong_nap"
	s = &suite{
		title: fmt.Sprintf("== suite offcpu: pingpong, %d round trips x spin %d, 2 threads on one CPU; off_cpu min_block %v, mechanism %s ==",
			e.o.roundTrips, e.o.spin, e.o.minBlock, e.o.mechanism),
		scenarios: []scenario{baselineScenario(w)},
	}
	var notes []string
	collectorSc := ""
	if !e.o.skipCollector {
		cfg := e.collector(profileConfig{offCPU: true, minBlock: e.o.minBlock, mechanism: e.o.mechanism})
		fp := e.collector(profileConfig{offCPU: true, minBlock: e.o.minBlock, mechanism: e.o.mechanism, unwinding: "frame_pointer"})
		s.scenarios = append(s.scenarios, collectorScenario(scOffCPU, cfg, w, marker), collectorScenario(scOffCPUFP, fp, w, marker))
		collectorSc = scOffCPU
	}
	if !e.o.skipPerf {
		var probe perfProbe
		probe, cleanup = probePerfSwitch(ctx, e.perf, e.dir)
		if probe.unavailable != "" {
			notes = append(notes, "perf sched_switch: unavailable ("+probe.unavailable+")")
		} else {
			s.scenarios = append(s.scenarios, perfScenario(scPerfSwitch, e, perfSwitchArgs, w))
		}
		if probe.note != "" {
			notes = append(notes, "perf sched_switch: "+probe.note)
		}
		for _, n := range notes {
			fmt.Println(n)
		}
	}
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, marker, offCPUChecks(e.o.minBlock.String()))
	s.rep.notes = notes
	return s, cleanup, nil
}

// addUnwindingScenarios adds the collector sampling the host at 99 Hz with
// unwinding::method frame_pointer and auto (unless -skip-collector), and
// returns the scenario whose collector figures the report gives (auto, or
// "").
func (s *suite) addUnwindingScenarios(e env, w workload, marker string) string {
	if e.o.skipCollector {
		return ""
	}
	s.scenarios = append(s.scenarios,
		collectorScenario(scFramePtr, e.collector(profileConfig{cpuHz: 99, unwinding: "frame_pointer"}), w, marker),
		collectorScenario(scUnwindAuto, e.collector(profileConfig{cpuHz: 99, unwinding: "auto"}), w, marker))
	return scUnwindAuto
}

func scenarioNames(scs []scenario) []string {
	names := make([]string, len(scs))
	for i, sc := range scs {
		names[i] = sc.name
	}
	return names
}
