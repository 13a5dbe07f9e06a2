package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

//go:embed workloads/fixedwork.c
var fixedworkSource []byte

//go:embed workloads/pingpong.c
var pingpongSource []byte

//go:embed workloads/pyfixed.py
var pyfixedSource []byte

//go:embed workloads/JavaFixed.java
var javafixedSource []byte

//go:embed workloads/nodefixed.js
var nodefixedSource []byte

//go:embed workloads/rubyfixed.rb
var rubyfixedSource []byte

//go:embed workloads/phpfixed.php
var phpfixedSource []byte

// workload is a compiled workload and the arguments of each of its runs.
type workload struct {
	name string // also the prefix of its stderr lines ("fixedwork: cpu_ns N")
	bin  string
	args []string
	// dir is the working directory of its runs (empty: the bench's), where
	// files it writes by relative name land.
	dir string
	// chain, if set, is a call chain, leaf first: the collector's runs count
	// the share of the workload's samples whose stack has these functions in
	// this order (other frames may come between), and whether it has
	// samples of the workload's pid at all (it prints its pid on stderr,
	// "nodefixed: pid N").
	chain []string
}

func (w workload) argv() []string { return append([]string{w.bin}, w.args...) }

// buildWorkload writes the embedded C source of workload name into dir and
// compiles it with frame pointers and debug info, so every profiler can
// unwind and symbolize it, then extraFlags (which may take the frame
// pointers away again). It returns the path of the binary.
func buildWorkload(ctx context.Context, dir, name string, source []byte, extraFlags ...string) (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("no C compiler %q to build the workload (set CC): %w", cc, err)
	}
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	if len(extraFlags) > 0 {
		bin += "-" + strings.Trim(strings.Join(extraFlags, ""), "-")
	}
	args := append([]string{"-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", bin, src}, extraFlags...)
	cmd := exec.CommandContext(ctx, cc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the workload %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// runResult is one run of the workload.
type runResult struct {
	wall    time.Duration // as printed by the workload itself
	cpu     time.Duration // the workload's user+system time, as printed by it
	outside time.Duration // from our start of the command to its exit
	// switchRate: context switches per second, as printed by the workload
	// (pingpong only; 0 if it printed none).
	switchRate float64
	// pid: the workload's process id, as printed by it (0 if it printed
	// none).
	pid int
}

// runCommand runs argv (workload w, possibly behind perf) to completion and
// returns the wall time the workload printed on stdout. before, if not nil,
// is called right before the process starts; the time between before and the
// return is what runResult.outside measures.
func runCommand(ctx context.Context, w workload, argv []string, before func()) (runResult, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = w.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if before != nil {
		before()
	}
	start := time.Now()
	err := cmd.Run()
	outside := time.Since(start)
	if err != nil {
		return runResult{}, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail(stderr.String(), 10))
	}
	res, err := parseRun(w, argv, stdout.String(), stderr.String())
	res.outside = outside
	return res, err
}

// parseRun reads the figures workload w printed (run as argv).
func parseRun(w workload, argv []string, stdout, stderr string) (runResult, error) {
	wall, err := parseWallNS(stdout)
	if err != nil {
		return runResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(stderr, 10))
	}
	cpu, err := parseCPUNS(stderr, w.name)
	if err != nil {
		return runResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(stderr, 10))
	}
	return runResult{wall: wall, cpu: cpu, switchRate: parseSwitchRate(stderr, w.name), pid: parsePID(stderr, w.name)}, nil
}

// runBaseline runs the workload alone.
func runBaseline(ctx context.Context, w workload) (runResult, error) {
	return runCommand(ctx, w, w.argv(), nil)
}

// runPerf runs the workload under `perf record <args> -o <dir>/perf.data`
// and removes perf.data afterwards.
func runPerf(ctx context.Context, perf string, args []string, dir string, w workload) (runResult, error) {
	data := filepath.Join(dir, "perf.data")
	defer os.Remove(data)
	defer os.Remove(data + ".old")
	argv := append(append(append([]string{perf, "record"}, args...), "-o", data, "--"), w.argv()...)
	return runCommand(ctx, w, argv, nil)
}

// collectorRun is one run of the workload beside a ready collector.
type collectorRun struct {
	runResult
	cpuTicks float64 // collector CPU, % of a core, from utime+stime
	cpuSched float64 // collector CPU, % of a core, from schedstat (-1: n/a)
	peakRSS  uint64  // collector VmHWM at the end, bytes
	// sawWorkload: the collector's pprof files name the workload's marker
	// function (for a workload with a chain: hold samples of its pid), so
	// it did profile the workload.
	sawWorkload bool
	// depth is the mean number of frames of the samples naming the marker
	// in the collector's pprof files.
	depth float64
	// chain: the workload's samples and those with its chain (workloads
	// with a chain only).
	chain chainCount
	// steadyTicks and steadySched are the collector's CPU, % of a core,
	// from steadyAfter into the run to its end, from utime+stime and
	// schedstat (-1: n/a; both when the run lasted less than steadyAfter +
	// 1 s).
	steadyTicks, steadySched float64
}

// runWithCollector starts the collector, waits until it is ready and settled,
// runs the workload once while measuring the collector's CPU time over the
// workload's lifetime, reads its peak RSS and stops it with SIGTERM. marker is
// a function of the workload its pprof files must name.
func runWithCollector(ctx context.Context, cfg collectorConfig, w workload, marker string) (collectorRun, error) {
	c, err := startCollector(ctx, cfg)
	if err != nil {
		return collectorRun{}, err
	}
	defer func() { _ = c.stop() }() // stopped below; this is for early returns

	var before cpuSample
	var beforeErr error
	var mid func() (cpuSample, time.Time, bool)
	res, err := runCommand(ctx, w, w.argv(), func() {
		before, beforeErr = readCPU(c.pid())
		mid = sampleCPULater(c.pid(), steadyAfter)
	})
	if err != nil {
		if mid != nil {
			mid()
		}
		return collectorRun{}, err
	}
	midSample, midAt, midOK := mid()
	select {
	case <-c.exited:
		return collectorRun{}, fmt.Errorf("collector exited during the run (%v); its last output (%s):\n%s", c.waitErr, c.logPath, c.lastLines(30))
	default:
	}
	after, afterErr := readCPU(c.pid())
	afterAt := time.Now()
	if err := errors.Join(beforeErr, afterErr); err != nil {
		return collectorRun{}, fmt.Errorf("collector died during the run? %w\n%s", err, c.lastLines(20))
	}
	rss, err := readVmHWM(c.pid())
	if err != nil {
		return collectorRun{}, fmt.Errorf("collector peak RSS: %w", err)
	}
	if err := c.stop(); err != nil {
		return collectorRun{}, err
	}
	seen, err := c.profilesMention(marker)
	if err != nil {
		return collectorRun{}, fmt.Errorf("reading the collector's pprof files: %w", err)
	}
	depth, err := c.meanDepth(marker)
	if err != nil {
		return collectorRun{}, fmt.Errorf("reading the collector's pprof files: %w", err)
	}
	out := collectorRun{runResult: res, peakRSS: rss, sawWorkload: seen, depth: depth}
	if len(w.chain) > 0 {
		if res.pid <= 0 {
			return collectorRun{}, fmt.Errorf("workload %s printed no pid", w.name)
		}
		if out.chain, err = c.chainShare(res.pid, w.chain); err != nil {
			return collectorRun{}, fmt.Errorf("reading the collector's pprof files: %w", err)
		}
		// The marker may be a frame no walker names yet: the collector saw
		// the workload if it has samples of its pid.
		out.sawWorkload = out.chain.total > 0
	}
	out.cpuTicks, out.cpuSched = cpuPercent(before, after, res.outside)
	out.steadyTicks, out.steadySched = -1, -1
	if midOK && afterAt.Sub(midAt) >= time.Second {
		out.steadyTicks, out.steadySched = cpuPercent(midSample, after, afterAt.Sub(midAt))
	}
	return out, nil
}

// steadyAfter is how long into a workload's run the collector is taken to
// be in steady state: the new process's tables loaded (100 ms after its
// announcement, then the time to build them).
const steadyAfter = 2 * time.Second

// sampleCPULater samples the CPU time of process pid after d, unless the
// returned func is called first. That func returns the sample, when it
// was taken and whether it was (a sample that failed was not).
func sampleCPULater(pid int, d time.Duration) func() (cpuSample, time.Time, bool) {
	type taken struct {
		s  cpuSample
		at time.Time
		ok bool
	}
	cancel, result := make(chan struct{}), make(chan taken, 1)
	go func() {
		select {
		case <-cancel:
			result <- taken{}
		case <-time.After(d):
			s, err := readCPU(pid)
			result <- taken{s, time.Now(), err == nil}
		}
	}()
	return func() (cpuSample, time.Time, bool) {
		close(cancel)
		t := <-result
		return t.s, t.at, t.ok
	}
}

// measureIdle starts the collector with no workload, waits until it is
// settled and returns its CPU use over window, in % of a core.
func measureIdle(ctx context.Context, cfg collectorConfig, window time.Duration) (ticks, sched float64, err error) {
	c, err := startCollector(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = c.stop() }() // stopped below; this is for early returns
	before, err := readCPU(c.pid())
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-c.exited:
		return 0, 0, fmt.Errorf("collector exited while idle\n%s", c.lastLines(20))
	case <-time.After(window):
	}
	after, err := readCPU(c.pid())
	if err != nil {
		return 0, 0, err
	}
	elapsed := time.Since(start)
	if err := c.stop(); err != nil {
		return 0, 0, err
	}
	ticks, sched = cpuPercent(before, after, elapsed)
	return ticks, sched, nil
}

// cpuPercent turns two CPU samples taken elapsed apart into % of one core,
// from ticks and from schedstat (-1 when schedstat is unavailable or lost a
// thread that exited in between).
func cpuPercent(before, after cpuSample, elapsed time.Duration) (ticks, sched float64) {
	secs := elapsed.Seconds()
	ticks = 100 * float64(int64(after.ticks)-int64(before.ticks)) / clockTicksPerSecond / secs
	sched = -1
	if before.schedNS > 0 && after.schedNS >= before.schedNS {
		sched = 100 * float64(after.schedNS-before.schedNS) / 1e9 / secs
	}
	return ticks, sched
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
