package main

// The arithmetic of the projection to many nodes: OTLP bytes per node per
// minute from a measured window, the gateway's CPU per byte and per
// node-minute from a replay step, and the cores a gateway tier needs.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// projectionNodes is the fleet size the reports project to.
const projectionNodes = 10000

// otlpWindow is what a collector's otlp_grpc exporter sent to the sink over
// a measured window.
type otlpWindow struct {
	counts   otlpCounts
	elapsed  time.Duration
	interval time.Duration // the collector's report interval
	events   []otlpEvent   // the requests, in arrival order
	payloads [][]byte      // the requests, serialized and uncompressed
}

// exportBurstGap: requests less than this apart are one report's export.
const exportBurstGap = 2 * time.Second

// exportBursts groups requests in arrival order into exports (requests
// less than exportBurstGap apart are one) and returns each export's start
// and compressed bytes.
func exportBursts(events []otlpEvent) (starts []time.Time, bytes []int64) {
	for i, e := range events {
		if i == 0 || e.at.Sub(events[i-1].at) >= exportBurstGap {
			starts, bytes = append(starts, e.at), append(bytes, 0)
		}
		bytes[len(bytes)-1] += e.wireBytes
	}
	return starts, bytes
}

// exportRate is the exports per minute seen: exports but the first over
// the time from the first to the last; ok is false with fewer than two.
func exportRate(events []otlpEvent) (exportsPerMin float64, ok bool) {
	starts, _ := exportBursts(events)
	if len(starts) < 2 {
		return 0, false
	}
	return perMinute(int64(len(starts)-1), starts[len(starts)-1].Sub(starts[0])), true
}

// bytesPerMinute is the compressed OTLP per minute of the window: the mean
// export times the exports a minute of report intervals makes (the receiver
// exports once per report). A window of fixed length holds one export more
// or less depending on where the reports fall, and on a loaded host a
// report can leave seconds late and the next on time, which the mean export
// does not depend on. Without exports or interval, the window's bytes over
// its length.
func (w otlpWindow) bytesPerMinute() float64 {
	_, bytes := exportBursts(w.events)
	if len(bytes) == 0 || w.interval <= 0 {
		return perMinute(w.counts.wireBytes, w.elapsed)
	}
	var sum int64
	for _, b := range bytes {
		sum += b
	}
	return float64(sum) / float64(len(bytes)) * float64(time.Minute) / float64(w.interval)
}

// compression is the window's uncompressed bytes per compressed byte.
func (w otlpWindow) compression() float64 {
	return ratio(float64(w.counts.rawBytes), float64(w.counts.wireBytes))
}

// exportsPerMinute is the window's export rate as seen (from its length
// with fewer than two exports).
func (w otlpWindow) exportsPerMinute() float64 {
	if n, ok := exportRate(w.events); ok {
		return n
	}
	return perMinute(w.counts.requests, w.elapsed)
}

// perMinute scales n counted over elapsed to one minute (0 without time).
func perMinute(n int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds() * 60
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// line is the window's figures as one line of progress.
func (w otlpWindow) line() string {
	c := w.counts
	return fmt.Sprintf("  OTLP (otlp_grpc, gzip) over %.0fs: %d requests (%.1f per minute seen), %.1f KiB/min compressed at one export per report (%.1f KiB/min over the window; x%.2f on the TCP connection; %.1fx smaller than uncompressed), %.1f KiB per request",
		w.elapsed.Seconds(), c.requests, w.exportsPerMinute(), w.bytesPerMinute()/1024, perMinute(c.wireBytes, w.elapsed)/1024, ratio(float64(c.connBytes), float64(c.wireBytes)),
		w.compression(), ratio(float64(c.wireBytes), float64(c.requests))/1024)
}

// printOTLPTable prints the OTLP figures of the busy suite's phases.
func printOTLPTable(w io.Writer, rows []busyRow) {
	fmt.Fprintln(w, "| phase | OTLP requests (per min seen) | KiB/min compressed (gzip), one export per report | KiB/min compressed over the window | TCP bytes / compressed | KiB/min uncompressed | KiB per request compressed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.col == nil {
			continue
		}
		o := r.col.otlp
		fmt.Fprintf(w, "| %s | %d (%.1f) | %.1f | %.1f | %.2f | %.1f | %.1f |\n", r.name, o.counts.requests, o.exportsPerMinute(),
			o.bytesPerMinute()/1024, perMinute(o.counts.wireBytes, o.elapsed)/1024, ratio(float64(o.counts.connBytes), float64(o.counts.wireBytes)),
			o.bytesPerMinute()*o.compression()/1024, ratio(float64(o.counts.wireBytes), float64(o.counts.requests))/1024)
	}
}

// gatewayStep is one replay rate of the gateway suite, measured.
type gatewayStep struct {
	nodes     int           // node equivalents: one request per node per report interval
	target    float64       // requests per second asked
	elapsed   time.Duration // of the step
	sent      otlpCounts    // by the client: requests answered OK, bytes
	failed    int64         // requests that failed
	forwarded otlpCounts    // received by the sink from the gateway
	cpuTicks  uint64        // the gateway's utime+stime over the step
	peakRSS   uint64        // the gateway's VmHWM after the step
}

// achieved is the rate of requests answered OK, per second.
func (s gatewayStep) achieved() float64 {
	return ratio(float64(s.sent.requests), s.elapsed.Seconds())
}

// keptUp reports whether the step reached 90% of its target rate with no
// failure.
func (s gatewayStep) keptUp() bool {
	return s.failed == 0 && s.achieved() >= 0.9*s.target
}

// cpuSeconds is the gateway's CPU time over the step.
func (s gatewayStep) cpuSeconds() float64 { return float64(s.cpuTicks) / clockTicksPerSecond }

// cpuPerMB is the gateway's CPU seconds per MB (10^6 bytes) of compressed
// OTLP received.
func (s gatewayStep) cpuPerMB() float64 {
	return ratio(s.cpuSeconds(), float64(s.sent.wireBytes)/1e6)
}

// cpuPerNodeMinute is the gateway's CPU seconds per node-minute: each
// request is one node's report of interval.
func (s gatewayStep) cpuPerNodeMinute(interval time.Duration) float64 {
	nodeMinutes := float64(s.sent.requests) * interval.Seconds() / 60
	return ratio(s.cpuSeconds(), nodeMinutes)
}

// gatewayCores is the gateway tier's cores for nodes sending bytesPerNodeMin
// each, at cpuPerMB CPU seconds per MB: (bytes/s into the tier) x (CPU
// seconds per byte).
func gatewayCores(bytesPerNodeMin float64, nodes int, cpuPerMB float64) float64 {
	return bytesPerNodeMin * float64(nodes) / 60 / 1e6 * cpuPerMB
}

// bestStep is the step whose ratios the projection uses: the fastest that
// kept up (the gateway's idle cost weighs least there), else the first; ok
// is false without steps.
func bestStep(steps []gatewayStep) (gatewayStep, bool) {
	if len(steps) == 0 {
		return gatewayStep{}, false
	}
	best, found := steps[0], false
	for _, s := range steps {
		if s.keptUp() && (!found || s.achieved() > best.achieved()) {
			best, found = s, true
		}
	}
	return best, true
}

// parseNodeSteps reads a comma-separated list of positive node counts in
// increasing order (-gateway-nodes).
func parseNodeSteps(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-gateway-nodes: %q is not a positive number of nodes", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-gateway-nodes: %d does not increase on %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-gateway-nodes: empty")
	}
	return out, nil
}

// printGatewaySteps prints the replay steps as a markdown table.
func printGatewaySteps(w io.Writer, steps []gatewayStep, interval time.Duration) {
	fmt.Fprintln(w, "| node equivalents | requests/s asked / answered | MB/s compressed in | gateway CPU % of a core | CPU s per MB compressed | CPU s per node-minute | forwarded MB/s compressed | failed | gateway peak RSS MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, s := range steps {
		secs := s.elapsed.Seconds()
		fmt.Fprintf(w, "| %d | %.1f / %.1f | %.2f | %.1f | %.3f | %.5f | %.2f | %d | %.1f |\n",
			s.nodes, s.target, s.achieved(), ratio(float64(s.sent.wireBytes)/1e6, secs), 100*ratio(s.cpuSeconds(), secs),
			s.cpuPerMB(), s.cpuPerNodeMinute(interval), ratio(float64(s.forwarded.wireBytes)/1e6, secs), s.failed, mib(s.peakRSS))
	}
}

// printProjection prints the projection to projectionNodes nodes of the
// node measured in node (the busy node's own collector and its OTLP) and the
// gateway's step.
func printProjection(w io.Writer, node busyFigures, step gatewayStep, interval time.Duration) {
	o := node.otlp
	bytesPerMin := o.bytesPerMinute()
	fmt.Fprintf(w, "projection to %d nodes like this one:\n", projectionNodes)
	fmt.Fprintf(w, "- per node: OTLP %.1f KiB/min compressed (gzip; %.1f KiB/min uncompressed, %.1f requests/min); collector CPU %.2f%% of a core, peak RSS %.1f MiB\n",
		bytesPerMin/1024, bytesPerMin*o.compression()/1024, o.exportsPerMinute(), node.cpuTicks, mib(node.peakRSS))
	fmt.Fprintf(w, "- fleet: %.1f MB/s compressed into the gateway tier (%.1f GB/day); node collectors %.0f cores and %.0f GiB in all\n",
		bytesPerMin*projectionNodes/60/1e6, bytesPerMin*projectionNodes*60*24/1e9,
		node.cpuTicks/100*projectionNodes, float64(node.peakRSS)*projectionNodes/(1<<30))
	fmt.Fprintf(w, "- gateway (plain collector, otlp -> otlp_grpc, at %d node equivalents): %.3f CPU s per MB compressed, %.5f CPU s per node-minute\n",
		step.nodes, step.cpuPerMB(), step.cpuPerNodeMinute(interval))
	fmt.Fprintf(w, "- gateway tier: %.2f cores from bytes (%.1f MB/s x %.3f CPU s/MB), %.2f cores from node-minutes (%d x %.5f / 60)\n",
		gatewayCores(bytesPerMin, projectionNodes, step.cpuPerMB()), bytesPerMin*projectionNodes/60/1e6, step.cpuPerMB(),
		step.cpuPerNodeMinute(interval)*projectionNodes/60, projectionNodes, step.cpuPerNodeMinute(interval))
}
