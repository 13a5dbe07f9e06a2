package main

import (
	"fmt"
	"strings"
	"time"
)

type result struct {
	transport, settings string
	truth               truth
	seen                seen
	exporter            map[string]float64
	exportFailures      int
}

func (r result) print() {
	fmt.Printf("profile types: %s\nlabel names: %s\nservice_name values: %s\n",
		strings.Join(r.seen.profileTypes, ", "), strings.Join(r.seen.labelNames, ", "), strings.Join(r.seen.services, ", "))
	fmt.Printf("exporter: %v; %d \"Exporting failed\" lines\n", r.exporter, r.exportFailures)
	for _, u := range r.seen.unknown {
		fmt.Printf("unknown_service series: %s\n", u)
	}
	fmt.Printf("cpuburn CPU %s in Pyroscope for %s used (%s), burn_hot %.1f%%\n",
		secs(r.seen.burnCPU), secs(r.truth.burnCPU), pct(r.seen.burnCPU, r.truth.burnCPU), 100*r.seen.burnHot)
	fmt.Printf("sleepers off-CPU: sleep_long %s for %s (%s), sleep_short %s for %s (%s)\n",
		secs(r.seen.sleepLong), secs(r.truth.sleepLong), pct(r.seen.sleepLong, r.truth.sleepLong),
		secs(r.seen.sleepShort), secs(r.truth.sleepShort), pct(r.seen.sleepShort, r.truth.sleepShort))
}

func printTable(rs []result) {
	fmt.Println("\n| exporter | settings | samples sent / failed | `Exporting failed` | cpuburn CPU (truth) | burn_hot | sleep_long (truth) | sleep_short (truth) | CPU series | service names | label names |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rs {
		fmt.Printf("| %s | %s | %.0f / %.0f | %d | %s (%s, %s) | %.1f%% | %s (%s, %s) | %s (%s, %s) | %d | %s | %s |\n",
			r.transport, r.settings,
			r.exporter["otelcol_exporter_sent_profile_samples"], r.exporter["otelcol_exporter_send_failed_profile_samples"],
			r.exportFailures,
			secs(r.seen.burnCPU), secs(r.truth.burnCPU), pct(r.seen.burnCPU, r.truth.burnCPU), 100*r.seen.burnHot,
			secs(r.seen.sleepLong), secs(r.truth.sleepLong), pct(r.seen.sleepLong, r.truth.sleepLong),
			secs(r.seen.sleepShort), secs(r.truth.sleepShort), pct(r.seen.sleepShort, r.truth.sleepShort),
			r.seen.series, strings.Join(r.seen.services, ", "), strings.Join(r.seen.labelNames, ", "))
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func pct(got, want time.Duration) string {
	if want == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*(got.Seconds()-want.Seconds())/want.Seconds())
}
