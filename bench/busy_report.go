package main

import (
	"fmt"
	"io"
	"strings"
)

// line is the phase's figures as one line of progress.
func (r busyRow) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s: host CPU without the collector %.1f%% of a core", r.name, r.hostBase)
	if r.execBase > 0 {
		fmt.Fprintf(&b, " (%.1f execs/s)", r.execBase)
	}
	if f := r.col; f != nil {
		fmt.Fprintf(&b, "; beside it %.1f%%", f.host)
		if f.execRate > 0 {
			fmt.Fprintf(&b, " (%.1f execs/s)", f.execRate)
		}
		fmt.Fprintf(&b, "; collector CPU %s, peak RSS %.1f MiB, RSS at end %.1f MiB, BPF maps %.1f MiB (%d maps)",
			fmtCPU(f.cpuTicks, f.cpuSched), mib(f.peakRSS), mib(f.endRSS), mib(f.mapBytes), f.maps)
		if f.metrics {
			fmt.Fprintf(&b, ", unwind tables %.0f (%.2f MiB), failed: %s, walks: %s",
				f.tables, f.tableBytes/(1<<20), fmtCounts(f.failed), fmtCounts(f.walks))
		}
	}
	for _, n := range r.notes {
		b.WriteString("\n  note: " + n)
	}
	return b.String()
}

// printBusyTable prints the suite's markdown tables.
func printBusyTable(w io.Writer, rows []busyRow, startup *busyStartup, notes []string) {
	fmt.Fprintln(w, "| phase | collector CPU % of a core | peak RSS MiB | BPF map memory MiB | unwind_tables_failed (by reason) | walks by end reason | host CPU without profiler |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		cpu, rss, maps, failed, walks := "n/a", "n/a", "n/a", "n/a", "n/a"
		if f := r.col; f != nil {
			cpu, rss, maps = fmt.Sprintf("%.2f", f.cpuTicks), fmt.Sprintf("%.1f", mib(f.peakRSS)), fmt.Sprintf("%.1f", mib(f.mapBytes))
			if f.metrics {
				failed, walks = fmtCounts(f.failed), fmtCounts(f.walks)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.1f%% of a core |\n", r.name, cpu, rss, maps, failed, walks, r.hostBase)
	}
	if startup != nil {
		fmt.Fprintf(w, "| start-up: first %v, runtimes running | %.2f | %.1f | %.1f | | | (as phase 4) |\n",
			busyStartupWindow, startup.cpuTicks, mib(startup.peakRSS), mib(startup.mapBytes))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | collector CPU (schedstat) | RSS at end MiB | unwind tables | unwind table MiB | BPF maps | host CPU beside the collector | execs/s without / beside |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		f := r.col
		if f == nil {
			continue
		}
		sched, tables, tableMiB, execs := "n/a", "n/a", "n/a", ""
		if f.cpuSched >= 0 {
			sched = fmt.Sprintf("%.2f", f.cpuSched)
		}
		if f.metrics {
			tables, tableMiB = fmt.Sprintf("%.0f", f.tables), fmt.Sprintf("%.2f", f.tableBytes/(1<<20))
		}
		if r.execBase > 0 || f.execRate > 0 {
			execs = fmt.Sprintf("%.1f / %.1f", r.execBase, f.execRate)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %d | %.1f%% of a core | %s |\n", r.name, sched, mib(f.endRSS), tables, tableMiB, f.maps, f.host, execs)
	}
	if startup != nil {
		fmt.Fprintf(w, "\nstart-up: ready %.1fs after start; CPU over the first %v %.2f%% of a core (schedstat %.2f%%)\n",
			startup.ready.Seconds(), busyStartupWindow, startup.cpuTicks, startup.cpuSched)
	}
	for _, n := range notes {
		fmt.Fprintln(w, "note: "+n)
	}
	for _, r := range rows {
		for _, n := range r.notes {
			fmt.Fprintf(w, "note (phase %s): %s\n", r.name, n)
		}
	}
}
