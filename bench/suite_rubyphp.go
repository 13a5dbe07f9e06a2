package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// rubyChain and phpChain are the call chains of rubyfixed.rb and
// phpfixed.php, leaf first, as the collector names them.
var (
	rubyChain = []string{"Object#fib", "Object#ruby_work", "<main>"}
	phpChain  = []string{"fib", "php_work", "{main}"}
)

// newRubySuite is the Ruby suite: rubyfixed.rb (pure-Ruby recursion)
// under Debian's Ruby -ruby-version (unpacked as the tests do) alone, and
// beside the collector sampling the host at 99 Hz with unwinding::method
// auto (Ruby frames walked in BPF) and frame_pointer (none: the CPU
// sampling alone, auto's peer).
func newRubySuite(_ context.Context, e env) (*suite, error) {
	r, err := debianRuby(e.o.rubyVersion)
	if err != nil {
		return nil, err
	}
	script := filepath.Join(e.dir, "rubyfixed.rb")
	if err := os.WriteFile(script, rubyfixedSource, 0o644); err != nil {
		return nil, err
	}
	args := append(append([]string{}, r.Args...), script, strconv.FormatUint(e.o.rubyIterations, 10))
	w := workload{name: "rubyfixed", bin: r.Path, args: args, chain: rubyChain}
	return interpretedSuite(e, w, fmt.Sprintf("== suite ruby: rubyfixed.rb under %s, %d x fib(25) ==", r.Path, e.o.rubyIterations)), nil
}

// newPHPSuite is the PHP suite: phpfixed.php (pure-PHP recursion) under
// Debian's PHP CLI -php-version without opcache alone, and beside the
// collector with unwinding::method auto (PHP frames walked in BPF) and
// frame_pointer.
func newPHPSuite(_ context.Context, e env) (*suite, error) {
	p, err := testutil.DebianPHPOf(runtime.GOARCH, e.o.phpVersion)
	if err != nil {
		return nil, err
	}
	script := filepath.Join(e.dir, "phpfixed.php")
	if err := os.WriteFile(script, phpfixedSource, 0o644); err != nil {
		return nil, err
	}
	args := append(p.Args(false, ""), script, strconv.FormatUint(e.o.phpIterations, 10))
	w := workload{name: "phpfixed", bin: p.Path, args: args, chain: phpChain}
	return interpretedSuite(e, w, fmt.Sprintf("== suite php: phpfixed.php under %s (no opcache), %d x fib(25) ==", p.Path, e.o.phpIterations)), nil
}

// interpretedSuite is a suite of w alone and beside the collector with
// unwinding auto and frame_pointer, judged by interpretedChecks.
func interpretedSuite(e env, w workload, title string) *suite {
	s := &suite{title: title, scenarios: []scenario{baselineScenario(w)}}
	collectorSc := s.addUnwindingScenarios(e, w, w.chain[0])
	s.rep = newReport(scenarioNames(s.scenarios), collectorSc, w.chain[0], interpretedChecks(w.chain))
	return s
}

// debianRuby returns Debian's Ruby version, from the suite RubyVersions
// takes it from.
func debianRuby(version string) (testutil.Ruby, error) {
	var have []string
	for _, v := range testutil.RubyVersions {
		if v.Version == version {
			return testutil.RubyOf(v.Suite, runtime.GOARCH, version)
		}
		have = append(have, v.Version)
	}
	return testutil.Ruby{}, fmt.Errorf("-ruby-version %s: want one of %s", version, strings.Join(have, ", "))
}

// interpretedChecks are the verdicts of the ruby and php suites: the share
// of the workload's samples whose stack has chain, with auto and
// frame_pointer; auto's slowdown and collector CPU as ratios to
// frame_pointer's in the same round (medians over the rounds), the wall
// ratio within 1 point; and the collector's CPU (over the run, and in
// steady state) and RSS with auto.
func interpretedChecks(chain []string) func(io.Writer, *report) {
	return func(w io.Writer, r *report) {
		for _, sc := range []string{scUnwindAuto, scFramePtr} {
			if share, ok := r.chains[sc].share(); ok {
				fmt.Fprintf(w, "%s: samples of the workload with %s: %.1f%% (%d of %d)\n",
					sc, strings.Join(chain, " ← "), share, r.chains[sc].matched, r.chains[sc].total)
			}
		}
		auto, fp := r.ratios[scUnwindAuto], r.ratios[scFramePtr]
		if len(auto) == 0 || len(fp) != len(auto) {
			fmt.Fprintln(w, "unwinding: n/a (collector skipped)")
			return
		}
		wall := perRound(auto, fp)
		cpu := perRound(r.cpuRatios[scUnwindAuto], r.cpuRatios[scFramePtr])
		fmt.Fprintf(w, "slowdown with auto / frame_pointer's <= 1.01: %s (wall %.3f, %.3f..%.3f; workload CPU %.3f)\n",
			yesNo(median(wall) <= 1.01), median(wall), slices.Min(wall), slices.Max(wall), median(cpu))
		if ca, cf := r.collectorCPU[scUnwindAuto], r.collectorCPU[scFramePtr]; len(ca) == len(cf) && len(ca) > 0 {
			c := perRound(ca, cf)
			fmt.Fprintf(w, "collector CPU with auto / frame_pointer's: %.2f (%.2f..%.2f; medians %.2f%% and %.2f%% of a core)\n",
				median(c), slices.Min(c), slices.Max(c), median(ca), median(cf))
		}
		autoCollectorFigures(w, r)
		head := fmt.Sprintf("collector CPU with auto <= %.1f%% of a core in steady state (from %v into the run to its end)", targetCPUPercent, steadyAfter)
		if cpu, source, ok := r.steadyCPU(); ok {
			fmt.Fprintf(w, "%s: %s (%.2f%%, %s)\n", head, yesNo(cpu <= targetCPUPercent), cpu, source)
		}
	}
}

// perRound returns a[i]/b[i] for each round i.
func perRound(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}
