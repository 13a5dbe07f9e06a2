package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// targetFloorRatio: our probe's per-call overhead may be at most this times
// the empty uprobe+uretprobe pair's.
const targetFloorRatio = 1.1

// probeReport accumulates the rounds of the probes suite.
type probeReport struct {
	scenarios []string // scenarios[0] is scNoProbe
	calls     uint64
	requests  uint64               // of the scenarios perRequest names
	ns        map[string][]float64 // ns/call per round
	overhead  map[string][]float64 // ns/call - that round's no-probe ns/call
	notes     []string
	warnings  int // runs that printed a warning
	// samplerNs is the CPU sampler's BPF run time per sample, per round,
	// of the linking scenarios.
	samplerNs map[string][]float64
}

func newProbeReport(scenarios []string, calls, requests uint64) *probeReport {
	return &probeReport{scenarios: scenarios, calls: calls, requests: requests, ns: map[string][]float64{}, overhead: map[string][]float64{},
		samplerNs: map[string][]float64{}}
}

// add records one round: each scenario's loop wall time.
// A Go scenario's overhead is over the Go workload's no-probe run.
func (r *probeReport) add(round map[string]time.Duration) {
	for sc, wall := range round {
		base := r.scenarios[0]
		if b, ok := goBase(sc); ok {
			base = b
		}
		ns := nsPerCall(wall, r.count(sc))
		r.ns[sc] = append(r.ns[sc], ns)
		r.overhead[sc] = append(r.overhead[sc], ns-nsPerCall(round[base], r.count(base)))
	}
}

// count is how many calls (or requests) a run of scenario sc makes.
func (r *probeReport) count(sc string) uint64 {
	if perRequest(sc) {
		return r.requests
	}
	return r.calls
}

// ratio returns the median over rounds of a's value / b's value in the
// same round (values from m), and whether both scenarios ran.
func (r *probeReport) ratio(m map[string][]float64, a, b string) (float64, bool) {
	va, vb := m[a], m[b]
	if len(va) == 0 || len(va) != len(vb) {
		return 0, false
	}
	ratios := make([]float64, len(va))
	for i := range va {
		ratios[i] = va[i] / vb[i]
	}
	return median(ratios), true
}

func (r *probeReport) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tns/call\tmin..max\toverhead/call")
	for _, sc := range r.scenarios {
		ns := r.ns[sc]
		if len(ns) == 0 {
			continue
		}
		over := "-"
		if sc != r.scenarios[0] && sc != scGoNoProbe && sc != scGoServer {
			over = fmt.Sprintf("%.0f ns", median(r.overhead[sc]))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f..%.1f\t%s\n", sc, median(ns), slices.Min(ns), slices.Max(ns), over)
	}
	tw.Flush()
	fmt.Fprintf(w, "(medians over %d rounds of the loop's wall time / %d calls; overhead = ns/call - that round's no-probe ns/call)\n",
		len(r.ns[r.scenarios[0]]), r.calls)
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}
	if r.warnings > 0 {
		fmt.Fprintf(w, "warning: %d runs printed a warning above: their figures may not measure what they should\n", r.warnings)
	}
	fmt.Fprintln(w)
	for _, ours := range []struct{ sc, label string }{{scOurs, "min_duration 0"}, {scOursFilter, "min_duration 1s"}} {
		if len(r.ns[ours.sc]) == 0 {
			continue
		}
		if x, ok := r.ratio(r.ns, ours.sc, scBpftrace); ok {
			fmt.Fprintf(w, "our probe ≤ bpftrace (%s): %s (ns/call %.0f vs %.0f, ratio %.3f)\n", ours.label,
				yesNo(x <= 1), median(r.ns[ours.sc]), median(r.ns[scBpftrace]), x)
		} else {
			fmt.Fprintf(w, "our probe ≤ bpftrace (%s): n/a (bpftrace not run)\n", ours.label)
		}
		if x, ok := r.ratio(r.overhead, ours.sc, scFloor); ok {
			fmt.Fprintf(w, "our probe ≤ %.1f× floor (overhead, %s): %s (overhead/call %.0f ns vs %.0f ns, ratio %.3f)\n",
				targetFloorRatio, ours.label, yesNo(x <= targetFloorRatio), median(r.overhead[ours.sc]), median(r.overhead[scFloor]), x)
		} else {
			fmt.Fprintf(w, "our probe ≤ %.1f× floor (overhead, %s): n/a (floor not run)\n", targetFloorRatio, ours.label)
		}
	}
	r.printLinking(w)
	r.printGo(w)
}

// printLinking reports what linking samples to scopes costs a probed call
// and a CPU sample.
func (r *probeReport) printLinking(w io.Writer) {
	if x, ok := r.ratio(r.ns, scLinkOn, scLinkOff); ok {
		fmt.Fprintf(w, "linking ≤ %.2f× per call (link_samples true / false, cpu %d Hz): %s (ns/call %.0f vs %.0f, ratio %.3f)\n",
			linkTarget, linkCPUHz, yesNo(x <= linkTarget), median(r.ns[scLinkOn]), median(r.ns[scLinkOff]), x)
	}
	if on, off := r.samplerNs[scLinkOn], r.samplerNs[scLinkOff]; len(on) > 0 && len(off) > 0 {
		fmt.Fprintf(w, "CPU sampler BPF run time per sample: %.0f ns with the probe linking, %.0f ns without (ratio %.3f; kernel BPF statistics)\n",
			median(on), median(off), median(on)/median(off))
	}
}

// nsPerCall is wall / calls in nanoseconds.
func nsPerCall(wall time.Duration, calls uint64) float64 {
	if calls == 0 {
		return 0
	}
	return float64(wall.Nanoseconds()) / float64(calls)
}

var (
	uprobesField    = regexp.MustCompile(`"uprobes":\s*(\d+)`)
	logRecordsField = regexp.MustCompile(`"log records":\s*(\d+)`)
	histBucket      = regexp.MustCompile(`^\[[^\]]*[\])]\s+(\d+)\s*\|`)
)

// attachedUprobes finds the collector's "probes attached" log line and
// returns its uprobes count; ok is false when there is no such line.
func attachedUprobes(log string) (n int, ok bool) {
	for line := range strings.Lines(log) {
		if !strings.Contains(line, attachMessage) {
			continue
		}
		if m := uprobesField.FindStringSubmatch(line); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n, true
	}
	return 0, false
}

// logRecordsLogged sums the log record counts of the debug exporter's
// basic-verbosity lines ("Logs {..., "log records": N}").
func logRecordsLogged(log string) uint64 {
	var total uint64
	for line := range strings.Lines(log) {
		if m := logRecordsField.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			total += n
		}
	}
	return total
}

// histCount sums the bucket counts of bpftrace's printed histograms
// ("[16K, 32K)   193783 |@@@@|").
func histCount(out string) uint64 {
	var total uint64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := histBucket.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			total += n
		}
	}
	return total
}

// bpftraceError returns bpftrace's first error line on stderr, except the
// harmless RLIMIT_MEMLOCK one (the kernel charges BPF memory to the cgroup),
// or "".
func bpftraceError(stderr string) string {
	for line := range strings.Lines(stderr) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "ERROR:") && !strings.Contains(line, "RLIMIT_MEMLOCK") {
			return line
		}
	}
	return ""
}
