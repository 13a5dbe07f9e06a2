package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestFrameNames(t *testing.T) {
	tests := []struct {
		name, fn string
		want     bool
	}{
		{"spin", "spin", true},
		{"JS:*spin /tmp/bench/nodefixed.js:9:14", "spin", true},
		{"LazyCompile:~work /tmp/bench/nodefixed.js:17:14", "work", true},
		{"JS:^main /tmp/x.js:25:14", "main", true},
		{"spinner", "spin", false},
		{"JS:*spin /tmp/x.js:9:14", "work", false},
		{"Builtins_InterpreterEntryTrampoline", "main", false},
		{"__libc_start_call_main", "main", false},
	}
	for _, tt := range tests {
		if got := frameNames(tt.name, tt.fn); got != tt.want {
			t.Errorf("frameNames(%q, %q) = %v, want %v", tt.name, tt.fn, got, tt.want)
		}
	}
}

// TestCountChain builds samples of two processes, leaf first, and counts
// those of one with spin ← work ← main in that order.
func TestCountChain(t *testing.T) {
	fns := map[string]*profile.Function{}
	loc := func(names ...string) *profile.Location { // inlined lines innermost first
		l := &profile.Location{}
		for _, n := range names {
			if fns[n] == nil {
				fns[n] = &profile.Function{Name: n}
			}
			l.Line = append(l.Line, profile.Line{Function: fns[n]})
		}
		return l
	}
	sample := func(pid int64, n int64, locs ...*profile.Location) *profile.Sample {
		return &profile.Sample{Value: []int64{n}, Location: locs, NumLabel: map[string][]int64{"pid": {pid}}}
	}
	prof := &profile.Profile{Sample: []*profile.Sample{
		sample(10, 5, loc("spin"), loc("Builtins_InterpreterEntryTrampoline"), loc("work"), loc("main"), loc("node::Start")),
		sample(10, 2, loc("spin", "work"), loc("main")),      // work inlined into spin's location
		sample(10, 3, loc("work"), loc("spin"), loc("main")), // wrong order
		sample(10, 4, loc("sqrt"), loc("spin"), loc("work")), // no main
		sample(10, 6), // no frames
		sample(11, 9, loc("spin"), loc("work"), loc("main")), // another process
	}}
	got := countChain(prof, 10, nodeChain)
	if want := (chainCount{matched: 7, total: 20}); got != want {
		t.Errorf("countChain = %+v, want %+v", got, want)
	}
	if share, ok := got.share(); !ok || share != 35 {
		t.Errorf("share = %v, %v; want 35, true", share, ok)
	}
	if _, ok := (chainCount{}).share(); ok {
		t.Error("share of no sample is not n/a")
	}
}

// TestNodeReport feeds the node suite's report one round and checks its
// verdict lines: the chain's share is reported whatever it is.
func TestNodeReport(t *testing.T) {
	rep := newReport([]string{scBaseline, scPerfNode, scFramePtr, scUnwindAuto}, scUnwindAuto, "samples of the workload's pid", nodeChecks)
	res := func(wall float64) runResult {
		return runResult{wall: time.Duration(wall * 1e9), cpu: time.Duration(wall * 1e9)}
	}
	rep.add(map[string]runResult{scBaseline: res(4), scPerfNode: res(4.4), scFramePtr: res(4.02), scUnwindAuto: res(4.04)},
		&collectorRun{cpuTicks: 0.4, cpuSched: 0.3, peakRSS: 60 << 20, sawWorkload: true, steadyTicks: 0.5, steadySched: 0.21})
	rep.addChain(scUnwindAuto, chainCount{matched: 0, total: 380})
	rep.addChain(scFramePtr, chainCount{})
	var b bytes.Buffer
	rep.print(&b)
	out := b.String()
	for _, want := range []string{
		"bpfprofiler auto: samples of the workload with spin ← work ← main: 0.0% (0 of 380)",
		"bpfprofiler frame_pointer: samples of the workload with spin ← work ← main: n/a (no sample of the workload)",
		"slowdown with auto <= frame_pointer's + 0.01: yes (wall ratio: auto 1.010, frame_pointer 1.005)",
		"slowdown with auto <= perf with --perf-basic-prof: yes (wall ratio: auto 1.010, perf 1.100)",
		"collector CPU with auto <= 0.5% of a core: yes (0.40%)",
		"collector CPU with auto <= 0.5% of a core in steady state (from 2s into the run to its end): yes (0.21%, schedstat)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	short := newReport(rep.scenarios, scUnwindAuto, rep.marker, nodeChecks)
	short.add(map[string]runResult{scBaseline: res(1), scPerfNode: res(1), scFramePtr: res(1), scUnwindAuto: res(1)},
		&collectorRun{cpuTicks: 3, cpuSched: -1, steadyTicks: -1, steadySched: -1})
	b.Reset()
	nodeChecks(&b, short)
	if want := "in steady state (from 2s into the run to its end): n/a (runs shorter than 3s)"; !strings.Contains(b.String(), want) {
		t.Errorf("short runs: report lacks %q:\n%s", want, b.String())
	}
}
