package main

// The busy suite's peer (-busy-peer): another profiler, such as the
// OpenTelemetry eBPF profiler built from its repository, measured in each
// phase right after the collector, on the same load, the same way: a fresh
// process, its CPU (utime+stime) and peak RSS over the phase after the
// settle time, and its CPU over its first busyStartupWindow. With
// -busy-peer-ready a burst's runtimes start once the peer says it profiles,
// as they start once the collector is ready.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// peerFigures are the peer's figures over a phase.
type peerFigures struct {
	cpuTicks, cpuSched float64 // % of a core over the phase
	sinceRenew         float64 // % of a core from a burst's renewal to the phase's end (0: none)
	startup            float64 // % of a core over its first busyStartupWindow
	peakRSS, endRSS    uint64
	host               float64 // host CPU beside it, % of a core
	requests           int64   // OTLP export requests it sent over the phase
}

// peerOTLP is the placeholder of -busy-peer for the OTLP sink's address.
const peerOTLP = "{otlp}"

// peerArgs splits -busy-peer at spaces and puts addr for {otlp}.
func peerArgs(command, addr string) ([]string, error) {
	args := strings.Fields(command)
	if len(args) == 0 {
		return nil, errors.New("-busy-peer: no command")
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, peerOTLP, addr)
	}
	return args, nil
}

var (
	peerRuns int
	// peerStartupWindow is the window of the peer's start-up figure (a
	// variable for tests).
	peerStartupWindow = busyStartupWindow
	// peerReadyTimeout bounds the wait for -busy-peer-ready.
	peerReadyTimeout = 2 * time.Minute
)

// measureBusyPeer starts the peer, runs renew (if any), lets it settle and
// measures it over one phase, then stops it.
func measureBusyPeer(ctx context.Context, e env, renew func() error) (f peerFigures, err error) {
	sink, err := startOTLPSink()
	if err != nil {
		return f, err
	}
	defer sink.close()
	sink.anyVersion.Store(true)
	args, err := peerArgs(e.o.busyPeer, sink.addr)
	if err != nil {
		return f, err
	}
	peerRuns++
	logPath := filepath.Join(e.dir, fmt.Sprintf("peer-%d.log", peerRuns))
	file, err := os.Create(logPath)
	if err != nil {
		return f, err
	}
	defer file.Close()
	out := newLineLogReady(file, e.o.busyPeerReady)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return f, fmt.Errorf("-busy-peer: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		if stopErr := stopPeer(cmd, exited); err == nil && stopErr != nil {
			err = fmt.Errorf("%w; its last output (%s):\n%s", stopErr, logPath, out.last(20))
		}
	}()
	pid := cmd.Process.Pid
	fail := func(err error) (peerFigures, error) {
		return f, fmt.Errorf("peer: %w; its last output (%s):\n%s", err, logPath, out.last(20))
	}
	// Its start-up figure is read at peerStartupWindow after its start,
	// whatever the phase does meanwhile.
	startupWindow := peerStartupWindow
	startup := make(chan cpuSample, 1)
	go func() {
		select {
		case <-time.After(time.Until(started.Add(startupWindow))):
		case <-exited:
		}
		s, _ := readCPU(pid)
		startup <- s
	}()
	if e.o.busyPeerReady != "" {
		select {
		case <-out.ready:
		case <-exited:
			return fail(errors.New("exited before it was ready"))
		case <-time.After(peerReadyTimeout):
			return fail(fmt.Errorf("%q not printed in %v", e.o.busyPeerReady, peerReadyTimeout))
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
	renewed := time.Now()
	var renewCPU cpuSample
	if renew != nil {
		if renewCPU, err = readCPU(pid); err != nil {
			return fail(err)
		}
		if err := renew(); err != nil {
			return f, err
		}
	}
	if err := waitWindow(ctx, time.Until(renewed.Add(e.o.busySettle)), exited); err != nil {
		return fail(err)
	}
	cpu0, err := readCPU(pid)
	if err != nil {
		return fail(err)
	}
	h0, err := readHostCPU()
	if err != nil {
		return f, err
	}
	start, o0 := time.Now(), sink.counts()
	if err := waitWindow(ctx, e.o.busyPhase, exited); err != nil {
		return fail(err)
	}
	cpu1, err := readCPU(pid)
	if err != nil {
		return fail(err)
	}
	h1, err := readHostCPU()
	if err != nil {
		return f, err
	}
	elapsed := time.Since(start)
	f.cpuTicks, f.cpuSched = cpuPercent(cpu0, cpu1, elapsed)
	if renew != nil {
		f.sinceRenew, _ = cpuPercent(renewCPU, cpu1, time.Since(renewed))
	}
	f.host = hostPercent(h0, h1, elapsed)
	f.requests = sink.counts().sub(o0).requests
	first := <-startup
	f.startup, _ = cpuPercent(cpuSample{}, first, startupWindow)
	if f.peakRSS, err = readVmHWM(pid); err != nil {
		return fail(err)
	}
	if f.endRSS, err = readVmRSS(pid); err != nil {
		return fail(err)
	}
	return f, nil
}

// stopPeer stops the peer with SIGINT, then SIGKILL after 15 s; an exit
// before it was asked to is an error.
func stopPeer(cmd *exec.Cmd, exited <-chan struct{}) error {
	select {
	case <-exited:
		return fmt.Errorf("peer exited on its own: %v", cmd.ProcessState)
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		return nil
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("peer did not stop within 15 s of SIGINT; killed")
	}
}

// printPeerTable prints the collector beside the peer, phase by phase.
func printPeerTable(w io.Writer, rows []busyRow, startup *busyStartup) {
	fmt.Fprintln(w, "| phase | collector CPU % of a core | peer CPU % of a core (schedstat) | collector / peer CPU | collector peak RSS MiB | peer peak RSS MiB | peer RSS at end MiB | peer first 10 s CPU % | peer OTLP requests | collector / peer CPU % from the burst's start |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		p := r.peer
		if p == nil {
			continue
		}
		cpu, ratio, rss := "n/a", "n/a", "n/a"
		if c := r.col; c != nil {
			cpu, rss = fmt.Sprintf("%.2f", c.cpuTicks), fmt.Sprintf("%.1f", mib(c.peakRSS))
			if p.cpuTicks > 0 {
				ratio = fmt.Sprintf("%.2f", c.cpuTicks/p.cpuTicks)
			}
		}
		peerCPU := fmt.Sprintf("%.2f", p.cpuTicks)
		if p.cpuSched >= 0 {
			peerCPU += fmt.Sprintf(" (%.2f)", p.cpuSched)
		}
		burst := "-"
		if c := r.col; c != nil && c.sinceRenew > 0 && p.sinceRenew > 0 {
			burst = fmt.Sprintf("%.2f / %.2f", c.sinceRenew, p.sinceRenew)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.1f | %.1f | %.2f | %d | %s |\n", r.name, cpu,
			peerCPU, ratio, rss, mib(p.peakRSS), mib(p.endRSS), p.startup, p.requests, burst)
	}
	if startup != nil {
		fmt.Fprintf(w, "\ncollector start-up (first %v, runtimes running): %.2f%% of a core; the peer's first %v are in its column above\n",
			busyStartupWindow, startup.cpuTicks, busyStartupWindow)
	}
}
