package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

type result struct {
	variant
	pod            testutil.FakePod
	truth          truth
	seen           seen
	exporter       map[string]float64
	exportFailures int
	// Over the workloads' run: the collector's CPU and the exporter's
	// bytes on the wire.
	elapsed      time.Duration
	collectorCPU time.Duration
	wireBytes    int64
}

func (r result) samples() string {
	if r.labels {
		return "labels"
	}
	return "bare"
}

func (r result) print() {
	fmt.Printf("profile types: %s\nlabel names: %s\nservice_name values: %s\n",
		strings.Join(r.seen.profileTypes, ", "), strings.Join(r.seen.labelNames, ", "), strings.Join(r.seen.services, ", "))
	fmt.Printf("resource labels: %s\n", r.resourceLabels())
	fmt.Printf("exporter: %v; %d \"Exporting failed\" lines\n", r.exporter, r.exportFailures)
	fmt.Printf("collector CPU %.2f%% of a core, OTLP %.1f KiB a minute on the wire, over %s\n",
		r.cpuPercent(), r.kibPerMinute(), secs(r.elapsed))
	for _, u := range r.seen.unknown {
		fmt.Printf("unknown_service series: %s\n", u)
	}
	fmt.Printf("cpuburn (pod %s/%s) CPU %s in Pyroscope for %s used (%s), burn_hot %.1f%%; selected by its pod label: %s (%s)\n",
		r.pod.Namespace, r.pod.Name, secs(r.seen.burnCPU), secs(r.truth.burnCPU), pct(r.seen.burnCPU, r.truth.burnCPU), 100*r.seen.burnHot,
		secs(r.seen.podCPU), pct(r.seen.podCPU, r.truth.burnCPU))
	fmt.Printf("sleepers off-CPU: sleep_long %s for %s (%s), sleep_short %s for %s (%s)\n",
		secs(r.seen.sleepLong), secs(r.truth.sleepLong), pct(r.seen.sleepLong, r.truth.sleepLong),
		secs(r.seen.sleepShort), secs(r.truth.sleepShort), pct(r.seen.sleepShort, r.truth.sleepShort))
}

// resourceLabels lists the resource attributes Pyroscope shows as labels,
// each with its label name and values.
func (r result) resourceLabels() string {
	var out []string
	for _, k := range resourceKeys {
		if l, ok := r.seen.resource[k]; ok {
			out = append(out, fmt.Sprintf("%s=%s", l.name, strings.Join(l.values, "|")))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

func (r result) cpuPercent() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return 100 * r.collectorCPU.Seconds() / r.elapsed.Seconds()
}

func (r result) kibPerMinute() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.wireBytes) / 1024 / r.elapsed.Minutes()
}

func printTable(rs []result) {
	fmt.Println("\n| exporter | settings | samples | samples sent / failed | `Exporting failed` | cpuburn CPU (truth) | by pod label | burn_hot | sleep_long (truth) | sleep_short (truth) | CPU series | resource labels | OTLP KiB/min | collector CPU |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rs {
		fmt.Printf("| %s | %s | %s | %.0f / %.0f | %d | %s (%s, %s) | %s (%s) | %.1f%% | %s (%s, %s) | %s (%s, %s) | %d | %s | %.1f | %.2f%% |\n",
			r.transport, r.settings, r.samples(),
			r.exporter["otelcol_exporter_sent_profile_samples"], r.exporter["otelcol_exporter_send_failed_profile_samples"],
			r.exportFailures,
			secs(r.seen.burnCPU), secs(r.truth.burnCPU), pct(r.seen.burnCPU, r.truth.burnCPU),
			secs(r.seen.podCPU), pct(r.seen.podCPU, r.truth.burnCPU), 100*r.seen.burnHot,
			secs(r.seen.sleepLong), secs(r.truth.sleepLong), pct(r.seen.sleepLong, r.truth.sleepLong),
			secs(r.seen.sleepShort), secs(r.truth.sleepShort), pct(r.seen.sleepShort, r.truth.sleepShort),
			r.seen.series, r.resourceLabels(), r.kibPerMinute(), r.cpuPercent())
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func pct(got, want time.Duration) string {
	if want == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*(got.Seconds()-want.Seconds())/want.Seconds())
}
