package main

import (
	"fmt"
	"math"
	"time"
)

// What the soak is judged against.
const (
	soakWarmup        = 10 * time.Minute // growth is measured after it
	soakGrowthWindow  = 20 * time.Minute // growth is judged when it has at least this after the warm-up
	soakMaxGrowth     = 1.0              // MiB/h, RSS and BPF memory
	soakExecShortfall = 0.10             // the exec rate may miss its target by this share
	// The collector's bounds: unwinder's maxTables (slots of the array of
	// tables) and the receiver's default unwinding::table_memory_mib.
	soakMaxUnwindTables    = 16 << 10
	soakMaxUnwindTableByte = 64 << 20
)

// growth is a least-squares slope over time.
type growth struct {
	from          time.Duration // samples from this time on
	n             int
	mibPerHour    float64
	stderrPerHour float64 // standard error of the slope; NaN with fewer than 3 samples
	ok            bool    // at least 2 samples at different times
}

// leastSquares fits y = a + b·x and returns b and its standard error (NaN
// with fewer than 3 points); ok is false with fewer than 2 distinct xs.
func leastSquares(xs, ys []float64) (slope, stderr float64, ok bool) {
	n := float64(len(xs))
	if len(xs) != len(ys) || len(xs) < 2 {
		return 0, math.NaN(), false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, math.NaN(), false
	}
	slope = sxy / sxx
	stderr = math.NaN()
	if len(xs) > 2 {
		var sse float64
		for i := range xs {
			r := ys[i] - (my + slope*(xs[i]-mx))
			sse += r * r
		}
		stderr = math.Sqrt(sse / (n - 2) / sxx)
	}
	return slope, stderr, true
}

// soakGrowth is the growth of value (bytes) over the samples from from on,
// in MiB per hour.
func soakGrowth(samples []soakSample, from time.Duration, value func(soakSample) float64) growth {
	var xs, ys []float64
	for _, s := range samples {
		if s.at >= from {
			xs = append(xs, s.at.Seconds())
			ys = append(ys, value(s))
		}
	}
	slope, se, ok := leastSquares(xs, ys)
	const perHour = 3600.0 / (1 << 20)
	return growth{from: from, n: len(xs), mibPerHour: slope * perHour, stderrPerHour: se * perHour, ok: ok}
}

func (g growth) String() string {
	if !g.ok {
		return "n/a"
	}
	if math.IsNaN(g.stderrPerHour) {
		return fmt.Sprintf("%+.2f MiB/h", g.mibPerHour)
	}
	return fmt.Sprintf("%+.2f ± %.2f MiB/h", g.mibPerHour, g.stderrPerHour)
}

// soakWarmupFor is the warm-up of a run of duration d: soakWarmup, or a
// third of a run shorter than three of them (its growth is reported, not
// judged).
func soakWarmupFor(d time.Duration) time.Duration {
	return min(soakWarmup, d/3)
}

// soakJudged says whether a run of duration d is long enough for its
// growth to be judged.
func soakJudged(d time.Duration) bool { return d-soakWarmup >= soakGrowthWindow }

// soakOutcome is what the suite knows besides the samples.
type soakOutcome struct {
	duration    time.Duration
	execTarget  float64 // execs per second
	memoryLimit uint64  // the cgroup's
	cgroupPeak  uint64
	alive       bool   // the collector ran to the end and stopped cleanly
	exitNote    string // why not
	buildIDs    int    // distinct build ids built
	builds      int64  // binaries built
	generations int    // of soakBinaries each
}

// soakCheck is one line of the judgement.
type soakCheck struct {
	name, measured, bound string
	judged, ok            bool
}

// judgeSoak checks the samples of a run: never judged as a pass without
// samples.
func judgeSoak(samples []soakSample, o soakOutcome) []soakCheck {
	if len(samples) == 0 {
		return []soakCheck{{name: "samples", measured: "none", bound: "at least one", judged: true}}
	}
	last := samples[len(samples)-1]
	var checks []soakCheck
	add := func(name, measured, bound string, judged, ok bool) {
		checks = append(checks, soakCheck{name, measured, bound, judged, ok})
	}
	add("no OOM kill in the cgroup", fmt.Sprintf("%d", last.oomKills), "0", true, last.oomKills == 0)
	alive := "alive to the end, stopped cleanly"
	if !o.alive {
		alive = o.exitNote
	}
	add("collector", alive, "alive to the end", true, o.alive)

	rate := 0.0
	if last.at > 0 {
		rate = float64(last.execs) / last.at.Seconds()
	}
	low := o.execTarget * (1 - soakExecShortfall)
	add("exec rate", fmt.Sprintf("%.1f/s", rate), fmt.Sprintf("≥ %.0f/s (%.0f/s less %.0f%%)", low, o.execTarget, 100*soakExecShortfall), true, rate >= low)
	add("binaries rebuilt with new build ids", fmt.Sprintf("%d distinct of %d built, %d generations", o.buildIDs, o.builds, o.generations),
		"every build id new, ≥ 2 generations", true, int64(o.buildIDs) == o.builds && o.generations >= 2)

	tables, tableBytes, scraped := -1.0, -1.0, 0
	for _, s := range samples {
		if s.metricsOK {
			scraped++
			tables, tableBytes = max(tables, s.unwindTables), max(tableBytes, s.unwindTableBytes)
		}
	}
	add("collector metrics scraped", fmt.Sprintf("%d of %d samples", scraped, len(samples)), "every sample", true, scraped == len(samples))
	add("unwind tables (peak)", fmt.Sprintf("%.0f", tables), fmt.Sprintf("≤ %d", soakMaxUnwindTables), true,
		scraped > 0 && tables <= soakMaxUnwindTables)
	add("unwind table bytes (peak)", fmt.Sprintf("%.1f MiB", tableBytes/(1<<20)), fmt.Sprintf("≤ %d MiB", soakMaxUnwindTableByte>>20), true,
		scraped > 0 && tableBytes <= soakMaxUnwindTableByte)
	add("cgroup memory (peak)", fmt.Sprintf("%.1f MiB", mib(o.cgroupPeak)), fmt.Sprintf("< %d MiB", o.memoryLimit>>20), true, o.cgroupPeak < o.memoryLimit)

	judged := soakJudged(o.duration)
	from := soakWarmupFor(o.duration)
	bound := fmt.Sprintf("< %.0f MiB/h", soakMaxGrowth)
	if !judged {
		bound += fmt.Sprintf(" (not judged: a run under %v)", soakWarmup+soakGrowthWindow)
	}
	for _, g := range []struct {
		name  string
		value func(soakSample) float64
	}{
		{"RSS growth", func(s soakSample) float64 { return float64(s.rss) }},
		{"BPF memory growth", func(s soakSample) float64 { return float64(s.bpf.total()) }},
	} {
		gr := soakGrowth(samples, from, g.value)
		add(fmt.Sprintf("%s from minute %.0f", g.name, from.Minutes()), gr.String(), bound, judged,
			gr.ok && gr.mibPerHour < soakMaxGrowth)
	}
	return checks
}

// soakPassed says whether every judged check passed.
func soakPassed(checks []soakCheck) bool {
	for _, c := range checks {
		if c.judged && !c.ok {
			return false
		}
	}
	return true
}
