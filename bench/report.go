package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Targets the report checks (as text; nothing fails on them).
const (
	targetCPUPercent      = 0.5 // collector CPU, % of one core, while profiling
	targetRSSMiB          = 60  // collector peak RSS
	targetOffCPUSlowdown  = 1.03
	targetOffCPUMinBlock  = "1ms" // the min_block the off-CPU target is set for
	noisyBaselineMaxRatio = 1.1   // baseline max/min above which wall ratios are noise
)

// report accumulates the rounds of one suite.
type report struct {
	scenarios   []string // scenarios[0] is the baseline
	collectorSc string   // the scenario run beside the collector ("" if none)
	marker      string   // function the collector's pprof files must name
	checks      func(w io.Writer, r *report)
	notes       []string // printed under the table

	walls     map[string][]float64 // seconds, per round
	ratios    map[string][]float64 // wall / same round's baseline wall
	cpus      map[string][]float64 // workload CPU seconds, per round
	cpuRatios map[string][]float64 // workload CPU / same round's baseline's
	switches  []float64            // baseline's context switches per second, per round

	cpuTicks []float64 // collector CPU per round, % of a core
	cpuSched []float64 // same from schedstat; nil once a round lacked it
	rss      []uint64  // collector VmHWM per round, bytes
	saw      []bool    // per round: the collector's profiles hold the workload
	blind    int       // rounds whose profiles lack the workload
	// steadyTicks, steadySched: collector CPU per round from steadyAfter
	// into the run on, % of a core (-1: n/a).
	steadyTicks, steadySched []float64
	schedOK                  bool

	haveIdle             bool
	idleTicks, idleSched float64

	depths map[string][]float64 // per collector scenario: mean frames of the marker's samples, per round
	// collectorCPU: per collector scenario, its CPU per round, % of a core
	// (schedstat's, else utime+stime's).
	collectorCPU map[string][]float64
	chains       map[string]chainCount // per collector scenario: the workload's samples and those with its chain, over all rounds
}

// addChain adds what a collector scenario counted of the workload's chain in
// a round.
func (r *report) addChain(scenario string, n chainCount) {
	if r.chains == nil {
		r.chains = map[string]chainCount{}
	}
	r.chains[scenario] = r.chains[scenario].add(n)
}

// addCollectorCPU records the collector's CPU in a round of a collector
// scenario.
func (r *report) addCollectorCPU(scenario string, c *collectorRun) {
	if r.collectorCPU == nil {
		r.collectorCPU = map[string][]float64{}
	}
	cpu := c.cpuSched
	if cpu < 0 {
		cpu = c.cpuTicks
	}
	r.collectorCPU[scenario] = append(r.collectorCPU[scenario], cpu)
}

// addDepth records the mean depth a collector scenario measured in a round.
func (r *report) addDepth(scenario string, depth float64) {
	if r.depths == nil {
		r.depths = map[string][]float64{}
	}
	r.depths[scenario] = append(r.depths[scenario], depth)
}

func newReport(scenarios []string, collectorSc, marker string, checks func(io.Writer, *report)) *report {
	return &report{
		scenarios:   scenarios,
		collectorSc: collectorSc,
		marker:      marker,
		checks:      checks,
		walls:       map[string][]float64{},
		ratios:      map[string][]float64{},
		cpus:        map[string][]float64{},
		cpuRatios:   map[string][]float64{},
		schedOK:     true,
	}
}

func (r *report) baseline() string { return r.scenarios[0] }

// add records one round: a result per scenario, and the collector's figures
// if cr is not nil.
func (r *report) add(round map[string]runResult, cr *collectorRun) {
	b := round[r.baseline()]
	base, baseCPU := b.wall.Seconds(), b.cpu.Seconds()
	for sc, res := range round {
		r.walls[sc] = append(r.walls[sc], res.wall.Seconds())
		r.ratios[sc] = append(r.ratios[sc], res.wall.Seconds()/base)
		r.cpus[sc] = append(r.cpus[sc], res.cpu.Seconds())
		r.cpuRatios[sc] = append(r.cpuRatios[sc], res.cpu.Seconds()/baseCPU)
	}
	if b.switchRate > 0 {
		r.switches = append(r.switches, b.switchRate)
	}
	if cr == nil {
		return
	}
	r.cpuTicks = append(r.cpuTicks, cr.cpuTicks)
	r.cpuSched = append(r.cpuSched, cr.cpuSched)
	if cr.cpuSched < 0 {
		r.schedOK = false
	}
	r.rss = append(r.rss, cr.peakRSS)
	r.steadyTicks = append(r.steadyTicks, cr.steadyTicks)
	r.steadySched = append(r.steadySched, cr.steadySched)
	r.saw = append(r.saw, cr.sawWorkload)
	if !cr.sawWorkload {
		r.blind++
	}
}

// roundLine describes round i (0-based) of n, just added.
func (r *report) roundLine(i, n int, order []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d/%d:", i+1, n)
	for _, sc := range order {
		k := len(r.walls[sc]) - 1
		fmt.Fprintf(&b, "  %s %s", sc, fmtWall(r.walls[sc][k]))
		if sc != r.baseline() {
			fmt.Fprintf(&b, " (x%.3f, cpu x%.3f)", r.ratios[sc][k], r.cpuRatios[sc][k])
		}
	}
	if k := len(r.cpuTicks) - 1; k >= 0 {
		fmt.Fprintf(&b, "  | collector CPU %s, peak RSS %.1f MiB",
			fmtCPU(r.cpuTicks[k], r.cpuSched[k]), mib(r.rss[k]))
		if !r.saw[k] {
			fmt.Fprintf(&b, ", WARNING: %s missing from its pprof files", r.marker)
		}
	}
	return b.String()
}

// cpu returns the collector CPU figure the summary and its check use: from
// schedstat (nanoseconds) when every round had it, else from utime+stime,
// whose 10 ms ticks are coarse over a ~4 s run (±0.25% of a core per tick).
func (r *report) cpu() (value float64, source string) {
	if r.schedOK && len(r.cpuSched) > 0 {
		return median(r.cpuSched), "schedstat"
	}
	return median(r.cpuTicks), "utime+stime"
}

// steadyCPU returns the median of the collector's CPU from steadyAfter into
// the runs on, from schedstat when every round that measured it had it, and
// false when no round's run was long enough.
func (r *report) steadyCPU() (value float64, source string, ok bool) {
	var ticks, sched []float64
	schedOK := true
	for i, t := range r.steadyTicks {
		if t < 0 {
			continue
		}
		ticks = append(ticks, t)
		sched = append(sched, r.steadySched[i])
		schedOK = schedOK && r.steadySched[i] >= 0
	}
	switch {
	case len(ticks) == 0:
		return 0, "", false
	case schedOK:
		return median(sched), "schedstat", true
	}
	return median(ticks), "utime+stime", true
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmedian wall\tratio vs baseline\tratio min..max\t\tworkload CPU\tCPU ratio")
	for _, sc := range r.scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f..%.3f\t\t%s\t%.3f\n", sc, fmtWall(median(r.walls[sc])),
			median(r.ratios[sc]), slices.Min(r.ratios[sc]), slices.Max(r.ratios[sc]),
			fmtWall(median(r.cpus[sc])), median(r.cpuRatios[sc]))
	}
	tw.Flush()
	fmt.Fprintf(w, "(ratios: medians over %d rounds of each run / that round's baseline; workload CPU is its\n"+
		" user+system time, which also holds the profilers' sampling interrupts and BPF program,\n"+
		" and is less sensitive than wall time to other load on the host)\n", len(r.walls[r.baseline()]))
	if len(r.switches) > 0 {
		fmt.Fprintf(w, "workload context switches: %.0f/s (baseline median)\n", median(r.switches))
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}

	if len(r.cpuTicks) == 0 {
		fmt.Fprintln(w, "collector: not run (-skip-collector)")
	} else {
		cpu, source := r.cpu()
		peak := slices.Max(r.rss)
		line := fmt.Sprintf("collector CPU: %.2f%% of a core (median, %s; utime+stime median %.2f%%), peak RSS %.1f MiB",
			cpu, source, median(r.cpuTicks), mib(peak))
		if r.haveIdle {
			line += ", idle CPU " + fmtCPU(r.idleTicks, r.idleSched)
		}
		fmt.Fprintln(w, line)
		if r.blind > 0 {
			fmt.Fprintf(w, "warning: in %d of %d rounds the collector's pprof files do not name %s: it did not\n"+
				" profile the workload, so its overhead is understated\n", r.blind, len(r.cpuTicks), r.marker)
		}
	}

	if base := r.walls[r.baseline()]; slices.Max(base) > noisyBaselineMaxRatio*slices.Min(base) {
		fmt.Fprintf(w, "warning: the baseline's wall time ranged from %s to %s: the host is busy with\n"+
			" other work, so wall ratios are unreliable; the CPU ratios are the better guide.\n",
			fmtWall(slices.Min(base)), fmtWall(slices.Max(base)))
	}

	fmt.Fprintln(w)
	if r.checks != nil {
		r.checks(w, r)
	}
}

// cpuChecks are the verdicts of the CPU suite: slowdown against perf's, the
// collector's CPU and RSS.
func cpuChecks(w io.Writer, r *report) {
	bpf, hasBpf := r.ratios[scBpfprofiler]
	perf, hasPerf := r.ratios[scPerf]
	switch {
	case !hasBpf:
		fmt.Fprintln(w, "slowdown no worse than perf's: n/a (collector skipped)")
	case !hasPerf:
		fmt.Fprintln(w, "slowdown no worse than perf's: n/a (perf skipped)")
	default:
		b, p := median(bpf), median(perf)
		fmt.Fprintf(w, "slowdown no worse than perf's: %s (wall ratio: bpfprofiler %.3f, perf %.3f)\n", yesNo(b <= p), b, p)
		b, p = median(r.cpuRatios[scBpfprofiler]), median(r.cpuRatios[scPerf])
		fmt.Fprintf(w, "slowdown no worse than perf's, by workload CPU: %s (CPU ratio: bpfprofiler %.3f, perf %.3f)\n", yesNo(b <= p), b, p)
	}
	if len(r.cpuTicks) > 0 {
		cpu, source := r.cpu()
		fmt.Fprintf(w, "collector CPU ≤ %.1f%% of a core: %s (%.2f%%, %s)\n", targetCPUPercent, yesNo(cpu <= targetCPUPercent), cpu, source)
		peak := mib(slices.Max(r.rss))
		fmt.Fprintf(w, "RSS ≤ %d MiB: %s (%.1f MiB)\n", targetRSSMiB, yesNo(peak <= targetRSSMiB), peak)
	}
}

// offCPUChecks returns the verdicts of the off-CPU suite, whose collector
// ran with min_block minBlock: the slowdown target (set for 1 ms) and the
// comparison with perf's sched_switch tracing.
func offCPUChecks(minBlock string) func(io.Writer, *report) {
	return func(w io.Writer, r *report) {
		head := "off-CPU slowdown ≤ 3% at min_block " + targetOffCPUMinBlock
		if minBlock != targetOffCPUMinBlock {
			head += " (collector ran with min_block " + minBlock + ")"
		}
		if ratios, ok := r.ratios[scOffCPU]; ok {
			wall, cpu := median(ratios), median(r.cpuRatios[scOffCPU])
			fmt.Fprintf(w, "%s: %s (wall ratio %.3f; by workload CPU: %s, CPU ratio %.3f)\n",
				head, yesNo(wall <= targetOffCPUSlowdown), wall, yesNo(cpu <= targetOffCPUSlowdown), cpu)
		} else {
			fmt.Fprintf(w, "%s: n/a (collector skipped)\n", head)
		}
		bpf, hasBpf := r.ratios[scOffCPU]
		if fp, ok := r.ratios[scOffCPUFP]; ok && hasBpf {
			b, f := median(bpf), median(fp)
			fmt.Fprintf(w, "unwind tables cost no more than frame pointers + 1 point: %s (wall ratio: auto %.3f, frame_pointer %.3f)\n",
				yesNo(b <= f+0.01), b, f)
		}
		if perf, ok := r.ratios[scPerfSwitch]; ok && hasBpf {
			b, p := median(bpf), median(perf)
			fmt.Fprintf(w, "slowdown no worse than perf sched_switch's: %s (wall ratio: bpfprofiler %.3f, perf %.3f)\n", yesNo(b <= p), b, p)
		}
	}
}

// fmtCPU formats a CPU share from ticks and, if available, schedstat.
func fmtCPU(ticks, sched float64) string {
	if sched < 0 {
		return fmt.Sprintf("%.2f%% (utime+stime)", ticks)
	}
	return fmt.Sprintf("%.2f%% (schedstat; utime+stime %.2f%%)", sched, ticks)
}

func fmtWall(secs float64) string {
	return fmt.Sprintf("%.3fs", secs)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// pythonChecks are the verdicts of the python suite: the samples of fib
// name it with auto (with frame_pointer none does: no Python frames), auto
// slows the workload no more than frame_pointer + 1 point and no more than
// perf with the interpreter's perf maps, and the collector's CPU and RSS.
func pythonChecks(w io.Writer, r *report) {
	autoAgainstFramePointer(w, r, "samples naming fib", scPerfPython, "perf with -X perf")
}

// javaChecks are the verdicts of the java suite: the samples of burn name
// it with its callers (with frame_pointer the walk stops at the first Java
// frame), auto slows the workload no more than frame_pointer + 1 point and
// no more than perf with frame pointers kept, and the collector's CPU and
// RSS.
func javaChecks(w io.Writer, r *report) {
	autoAgainstFramePointer(w, r, "samples naming JavaFixed.burn", scPerfJava, "perf with frame pointers kept")
}

// nodeChecks are the verdicts of the node suite: the share of the
// workload's samples whose stack has spin ← work ← main (its JavaScript
// frames, named by a V8 walker: none is without one, and the share is
// reported, not judged), auto slows the workload no more than frame_pointer
// (the CPU sampling alone) + 1 point and no more than perf with node's perf
// map, and the collector's CPU and RSS.
func nodeChecks(w io.Writer, r *report) {
	for _, sc := range []string{scUnwindAuto, scFramePtr} {
		n, ok := r.chains[sc]
		if !ok {
			continue
		}
		if share, ok := n.share(); ok {
			fmt.Fprintf(w, "%s: samples of the workload with %s: %.1f%% (%d of %d)\n",
				sc, strings.Join(nodeChain, " ← "), share, n.matched, n.total)
		} else {
			fmt.Fprintf(w, "%s: samples of the workload with %s: n/a (no sample of the workload)\n",
				sc, strings.Join(nodeChain, " ← "))
		}
	}
	autoAgainstFramePointer(w, r, "samples naming spin", scPerfNode, "perf with --perf-basic-prof")
	if len(r.cpuTicks) == 0 {
		return
	}
	head := fmt.Sprintf("collector CPU with auto <= %.1f%% of a core in steady state (from %v into the run to its end)", targetCPUPercent, steadyAfter)
	if cpu, source, ok := r.steadyCPU(); ok {
		fmt.Fprintf(w, "%s: %s (%.2f%%, %s)\n", head, yesNo(cpu <= targetCPUPercent), cpu, source)
	} else {
		fmt.Fprintf(w, "%s: n/a (runs shorter than %v)\n", head, steadyAfter+time.Second)
	}
}

// unwindChecks are the verdicts of the unwind suite: the workload's stacks
// are deeper with auto, auto slows it no more than frame_pointer + 1 point,
// and the collector's CPU and RSS.
func unwindChecks(w io.Writer, r *report) {
	autoAgainstFramePointer(w, r, "work_hot samples", scPerfDwarf, "perf --call-graph dwarf's")
}

// autoAgainstFramePointer prints the verdicts of a suite that runs the
// collector with unwinding auto and frame_pointer: the mean frames of the
// samples the report's marker names (what), the slowdowns against each
// other and against perf scenario perfSc, and the collector's figures.
func autoAgainstFramePointer(w io.Writer, r *report, what, perfSc, perfLabel string) {
	auto, hasAuto := r.ratios[scUnwindAuto]
	fp, hasFP := r.ratios[scFramePtr]
	if !hasAuto || !hasFP {
		fmt.Fprintln(w, "unwinding: n/a (collector skipped)")
		return
	}
	da, df := median(r.depths[scUnwindAuto]), median(r.depths[scFramePtr])
	fmt.Fprintf(w, "mean frames of %s: auto %.1f, frame_pointer %.1f\n", what, da, df)
	a, f := median(auto), median(fp)
	fmt.Fprintf(w, "slowdown with auto <= frame_pointer's + 0.01: %s (wall ratio: auto %.3f, frame_pointer %.3f)\n", yesNo(a <= f+0.01), a, f)
	if perf, ok := r.ratios[perfSc]; ok {
		fmt.Fprintf(w, "slowdown with auto <= %s: %s (wall ratio: auto %.3f, perf %.3f)\n", perfLabel, yesNo(a <= median(perf)), a, median(perf))
	}
	autoCollectorFigures(w, r)
}

// autoCollectorFigures prints the collector's CPU and peak RSS with
// unwinding auto against the targets.
func autoCollectorFigures(w io.Writer, r *report) {
	if len(r.cpuTicks) > 0 {
		c := median(r.cpuTicks)
		fmt.Fprintf(w, "collector CPU with auto <= %.1f%% of a core: %s (%.2f%%)\n", targetCPUPercent, yesNo(c <= targetCPUPercent), c)
		rss := mib(slices.Max(r.rss))
		fmt.Fprintf(w, "peak RSS with auto <= 80 MiB: %s (%.1f MiB)\n", yesNo(rss <= 80), rss)
	}
}
