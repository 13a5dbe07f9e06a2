package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"slices"
	"strconv"
)

//go:embed workloads/goallocloop/main.go
var goallocloopSource []byte

// The memory suite's scenarios: the collector sampling CPU at 99 Hz, the
// peer, and the same with memory::go on.
const (
	scMemoryPeer = "bpfprofiler 99Hz"
	scMemoryGo   = "bpfprofiler 99Hz, memory::go"
)

// newMemorySuite is the memory suite: goallocloop (allocation-heavy Go,
// sampling its allocations at the runtime's default rate) alone, beside
// the collector sampling CPU, and beside the collector sampling CPU with
// memory::go on (uprobes on the runtime's allocation profiling hooks).
func newMemorySuite(_ context.Context, e env) (*suite, error) {
	bin, err := buildGoWorkload(e.dir, "goallocloop", goallocloopSource)
	if err != nil {
		return nil, err
	}
	w := workload{name: "goallocloop", bin: bin, args: []string{strconv.FormatUint(e.o.allocRounds, 10)}}
	s := &suite{
		title:     fmt.Sprintf("== suite memory: goallocloop, %d allocations of 64 B to 32 KiB ==", e.o.allocRounds),
		scenarios: []scenario{baselineScenario(w)},
	}
	const marker = "main.main"
	if !e.o.skipCollector {
		s.scenarios = append(s.scenarios,
			collectorScenario(scMemoryPeer, e.collector(profileConfig{cpuHz: 99}), w, marker),
			collectorScenario(scMemoryGo, e.collector(profileConfig{cpuHz: 99, memoryGo: true}), w, marker))
	}
	s.rep = newReport(scenarioNames(s.scenarios), scMemoryGo, marker, memoryChecks)
	return s, nil
}

// memoryChecks is the memory suite's verdict: the slowdown memory::go adds
// to its peer's, as the ratio of their walls in the same round (medians
// over the rounds), within the 1%; and the collector CPU of each.
func memoryChecks(w io.Writer, r *report) {
	on, peer := r.ratios[scMemoryGo], r.ratios[scMemoryPeer]
	if len(on) == 0 || len(peer) != len(on) {
		fmt.Fprintln(w, "memory::go slowdown: n/a (collector skipped)")
		return
	}
	wall := perRound(on, peer)
	cpu := perRound(r.cpuRatios[scMemoryGo], r.cpuRatios[scMemoryPeer])
	fmt.Fprintf(w, "slowdown with memory::go / without <= 1.01: %s (wall %.3f, %.3f..%.3f; workload CPU %.3f; against the workload alone %.3f)\n",
		yesNo(median(wall) <= 1.01), median(wall), slices.Min(wall), slices.Max(wall), median(cpu), median(on))
	if ca, cp := r.collectorCPU[scMemoryGo], r.collectorCPU[scMemoryPeer]; len(ca) == len(cp) && len(ca) > 0 {
		fmt.Fprintf(w, "collector CPU, %% of a core: %.2f with memory::go, %.2f without (medians)\n", median(ca), median(cp))
	}
}
