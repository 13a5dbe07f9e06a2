package main

// Suite probes: the cost per call of a uprobe pair on a tiny function.
//
// workloads/probeloop.c calls probed_call() -probe-calls times in a tight
// loop and prints the loop's wall time; ns/call is that wall time / calls.
// Scenarios, interleaved over rounds (order rotated per round):
//
//   - no probe: the workload alone;
//   - bpfprofiler probe (min_duration 0 and 1s): the collector with cpu and
//     off_cpu disabled and one `symbol: probed_call` probe on the workload's
//     binary, its records going through a logs pipeline to the debug
//     exporter. With min_duration 0 every call emits a ring buffer record;
//     with 1s the BPF program drops every record. The workload is started
//     first and waits for a line on stdin; the collector's start-up scan
//     attaches to it ("probes attached" with 2 uprobes is checked), then
//     the loop starts;
//   - bpftrace: `bpftrace -c` with the same function timed into a histogram
//     (its count is checked against the calls);
//   - empty uprobe+uretprobe: two BPF programs returning 0, attached by the
//     bench itself; the floor every uprobe pair pays (the traps).
//
// Per-call overhead is a scenario's ns/call minus that round's no-probe
// ns/call; the report gives medians and the ratios of our probe to bpftrace
// (ns/call) and to the floor (overhead).

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

//go:embed workloads/probeloop.c
var probeloopSource []byte

// Scenario names of the probes suite.
const (
	scNoProbe    = "no probe"
	scOurs       = "bpfprofiler probe, min_duration 0"
	scOursFilter = "bpfprofiler probe, min_duration 1s"
	scBpftrace   = "bpftrace uprobe+uretprobe"
	scFloor      = "empty uprobe+uretprobe"
)

const (
	probedSymbol  = "probed_call"
	benchProbeID  = "bench.call"
	filterMinDur  = time.Second
	recordsWait   = 15 * time.Second // for the collector to log every record
	attachMessage = "probes attached"
)

// probeRun is one run of probeloop under one scenario.
type probeRun struct {
	wall time.Duration
	warn string // something looked wrong (printed, the run still counts)
	// samplerNs is the CPU sampler's BPF run time per sample during the
	// run (linking scenarios); 0: not measured.
	samplerNs float64
}

type probeScenario struct {
	name string
	run  func(ctx context.Context) (probeRun, error)
}

// runProbesSuite builds probeloop, runs every scenario in rounds and prints
// the report.
func runProbesSuite(ctx context.Context, e env) error {
	bin, err := buildWorkload(ctx, e.dir, "probeloop", probeloopSource)
	if err != nil {
		return err
	}
	calls := e.o.probeCalls
	w := workload{name: "probeloop", bin: bin, args: []string{strconv.FormatUint(calls, 10)}}
	fmt.Printf("== suite probes: probeloop, %d calls of %s per run ==\n", calls, probedSymbol)

	scs := []probeScenario{{scNoProbe, func(ctx context.Context) (probeRun, error) {
		res, err := runBaseline(ctx, w)
		return probeRun{wall: res.wall}, err
	}}}
	var notes []string
	if !e.o.skipCollector {
		for _, sc := range []struct {
			name string
			min  time.Duration
		}{{scOurs, 0}, {scOursFilter, filterMinDur}} {
			cfg := e.collector(profileConfig{probes: []benchProbe{{
				id: benchProbeID, fileMatch: "^" + regexp.QuoteMeta(bin) + "$", symbol: probedSymbol, minDuration: sc.min,
			}}})
			scs = append(scs, probeScenario{sc.name, func(ctx context.Context) (probeRun, error) {
				return runProbedByCollector(ctx, cfg, w, calls, sc.min == 0, false)
			}})
		}
		links := linkConfigs(e, bin)
		for _, name := range []string{scLinkOff, scLinkOn} {
			cfg := links[name]
			scs = append(scs, probeScenario{name, func(ctx context.Context) (probeRun, error) {
				return runProbedByCollector(ctx, cfg, w, calls, false, true)
			}})
		}
	}
	goScs, err := goProbeScenarios(ctx, e, calls)
	if err != nil {
		return err
	}
	scs = append(scs, goScs...)
	bt, cleanup, note := prepareBpftrace(ctx, e.dir, bin)
	defer cleanup()
	if note != "" {
		notes = append(notes, note)
		fmt.Println(note)
	}
	if bt != "" {
		scs = append(scs, probeScenario{scBpftrace, func(ctx context.Context) (probeRun, error) {
			return runBpftrace(ctx, bt, e.dir, w, calls)
		}})
	}
	floor, err := loadFloor()
	if err != nil {
		notes = append(notes, "empty uprobe+uretprobe: unavailable ("+err.Error()+")")
	} else {
		defer floor.close()
		scs = append(scs, probeScenario{scFloor, func(ctx context.Context) (probeRun, error) {
			return floor.run(ctx, w)
		}})
	}

	names := make([]string, len(scs))
	for i, sc := range scs {
		names[i] = sc.name
	}
	rep := newProbeReport(names, calls, e.o.goRequests)
	rep.notes = notes
	for r := range e.o.rounds {
		round := map[string]time.Duration{}
		var line strings.Builder
		fmt.Fprintf(&line, "round %d/%d:", r+1, e.o.rounds)
		for _, sc := range rotated(scs, r) {
			res, err := sc.run(ctx)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, sc.name, err)
			}
			if res.warn != "" {
				fmt.Printf("warning: round %d, %s: %s\n", r+1, sc.name, res.warn)
				rep.warnings++
			}
			round[sc.name] = res.wall
			if res.samplerNs > 0 {
				rep.samplerNs[sc.name] = append(rep.samplerNs[sc.name], res.samplerNs)
			}
			fmt.Fprintf(&line, "  %s %.0fns", sc.name, nsPerCall(res.wall, rep.count(sc.name)))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
		rep.add(round)
		fmt.Println(line.String())
	}
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	rep.print(os.Stdout)
	return nil
}

// runProbedByCollector starts probeloop waiting on stdin, then the collector
// (whose start-up scan attaches to the waiting process), checks the probe is
// attached, runs the loop and stops the collector. With wantRecords, it
// also waits until the debug exporter has logged a record per call; with
// sampler, it measures the CPU sampler's BPF run time per sample.
func runProbedByCollector(ctx context.Context, cfg collectorConfig, w workload, calls uint64, wantRecords, sampler bool) (probeRun, error) {
	if sampler {
		stats, err := enableBPFStats()
		if err != nil {
			return probeRun{}, err
		}
		defer stats.Close()
	}
	argv := append(w.argv(), "stdin")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return probeRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return probeRun{}, err
	}
	defer func() {
		_ = stdin.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	c, err := startCollector(ctx, cfg)
	if err != nil {
		return probeRun{}, err
	}
	defer func() { _ = c.stop() }() // stopped below; this is for early returns
	logText, err := os.ReadFile(c.logPath)
	if err != nil {
		return probeRun{}, err
	}
	uprobes, ok := attachedUprobes(string(logText))
	if !ok {
		return probeRun{}, fmt.Errorf("collector did not log %q (collector without probes?); its output (%s):\n%s", attachMessage, c.logPath, c.lastLines(30))
	}
	if uprobes < 2 {
		return probeRun{}, fmt.Errorf("collector attached %d uprobes, want 2 (entry and return of %s); its output (%s):\n%s", uprobes, probedSymbol, c.logPath, c.lastLines(30))
	}

	var rt0 time.Duration
	var runs0 uint64
	if sampler {
		rt0, runs0, _ = samplerStats()
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return probeRun{}, fmt.Errorf("starting the workload's loop: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return probeRun{}, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail(stderr.String(), 10))
	}
	res, err := parseRun(w, argv, stdout.String(), stderr.String())
	if err != nil {
		return probeRun{}, err
	}
	out := probeRun{wall: res.wall}
	if sampler {
		rt, runs, _ := samplerStats()
		if runs > runs0 {
			out.samplerNs = float64((rt - rt0).Nanoseconds()) / float64(runs-runs0)
		} else {
			out.warn = "no CPU sample ran during the loop"
		}
	}

	var got uint64
	deadline := time.Now().Add(recordsWait)
	for {
		logText, err = os.ReadFile(c.logPath)
		if err != nil {
			return probeRun{}, err
		}
		got = logRecordsLogged(string(logText))
		if !wantRecords || got >= calls || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return probeRun{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	switch {
	case wantRecords && got != calls:
		out.warn = fmt.Sprintf("the debug exporter logged %d records, want %d (one per call)", got, calls)
	case !wantRecords && got != 0:
		out.warn = fmt.Sprintf("the debug exporter logged %d records, want none (min_duration %v)", got, filterMinDur)
	}
	if err := c.stop(); err != nil {
		return probeRun{}, err
	}
	return out, nil
}

// bpftraceScript times probedSymbol of bin as the comparison asks.
func bpftraceScript(bin string) string {
	p := bin + ":" + probedSymbol
	return "uprobe:" + p + " { @s[tid] = nsecs; } uretprobe:" + p +
		" /@s[tid]/ { @d = hist(nsecs - @s[tid]); delete(@s[tid]); }"
}

// prepareBpftrace finds bpftrace and checks it can probe bin on a short
// run. If it cannot (or cannot detach cleanly) and tracefs is not mounted,
// it mounts tracefs and tries again. It returns bpftrace's path ("" if
// unusable), a cleanup that unmounts tracefs if it got mounted, and a note
// for the report.
func prepareBpftrace(ctx context.Context, dir, bin string) (path string, cleanup func(), note string) {
	cleanup = func() {}
	path, err := exec.LookPath("bpftrace")
	if err != nil {
		return "", cleanup, "bpftrace: unavailable (not in PATH)"
	}
	const trial = 1000
	w := workload{name: "probeloop", bin: bin, args: []string{strconv.Itoa(trial)}}
	try := func() (string, bool) {
		res, err := runBpftrace(ctx, path, dir, w, trial)
		if err != nil {
			return oneLine(err.Error()), false
		}
		return res.warn, res.warn == ""
	}
	reason, ok := try()
	if ok {
		return path, cleanup, ""
	}
	if mounted, err := tracefsMounted(); err != nil || mounted {
		return "", cleanup, "bpftrace: unavailable (" + reason + ")"
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "tracefs", "nodev", tracefsPath).CombinedOutput(); err != nil {
		return "", cleanup, fmt.Sprintf("bpftrace: unavailable (%s; mounting tracefs failed: %v %s)", reason, err, bytes.TrimSpace(out))
	}
	cleanup = func() {
		if out, err := exec.Command("umount", tracefsPath).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: warning: unmounting tracefs from %s: %v: %s\n", tracefsPath, err, bytes.TrimSpace(out))
		}
	}
	note = "bpftrace: tracefs was not mounted (" + reason + "); the bench mounted it on " + tracefsPath + " (unmounted after the suite)"
	if again, ok := try(); !ok {
		return "", cleanup, note + "; bpftrace still unusable: " + again
	}
	return path, cleanup, note
}

// runBpftrace runs the workload under `bpftrace -c`, which starts it once
// the probes are attached, and checks the histogram counted every call.
func runBpftrace(ctx context.Context, bpftrace, dir string, w workload, calls uint64) (probeRun, error) {
	outPath := filepath.Join(dir, "bpftrace.out")
	defer os.Remove(outPath)
	argv := []string{bpftrace, "-o", outPath, "-c", strings.Join(w.argv(), " "), "-e", bpftraceScript(w.bin)}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return probeRun{}, fmt.Errorf("bpftrace: %v\n%s", err, tail(stderr.String(), 10))
	}
	res, err := parseRun(w, argv, stdout.String(), stderr.String())
	if err != nil {
		return probeRun{}, err
	}
	out := probeRun{wall: res.wall}
	hist, err := os.ReadFile(outPath)
	if err != nil {
		return probeRun{}, err
	}
	if n := histCount(string(hist)); n != calls {
		out.warn = fmt.Sprintf("bpftrace's histogram counted %d calls, want %d", n, calls)
	} else if msg := bpftraceError(stderr.String()); msg != "" {
		out.warn = "bpftrace: " + msg
	}
	return out, nil
}

// floorProbes are two BPF programs that return 0 at once, attached as a
// uprobe and a uretprobe: what any uprobe pair costs at least.
type floorProbes struct {
	entry, exit *ebpf.Program
}

func loadFloor() (*floorProbes, error) {
	_ = rlimit.RemoveMemlock()
	load := func(name string) (*ebpf.Program, error) {
		return ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         name,
			Type:         ebpf.Kprobe,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
	}
	entry, err := load("bench_floor_in")
	if err != nil {
		return nil, fmt.Errorf("load an empty BPF program: %w", err)
	}
	exit, err := load("bench_floor_out")
	if err != nil {
		entry.Close()
		return nil, fmt.Errorf("load an empty BPF program: %w", err)
	}
	return &floorProbes{entry, exit}, nil
}

// run attaches the empty pair to the workload's binary (the uprobes apply
// to processes started afterwards), runs it and detaches.
func (f *floorProbes) run(ctx context.Context, w workload) (probeRun, error) {
	ex, err := link.OpenExecutable(w.bin)
	if err != nil {
		return probeRun{}, err
	}
	ret, err := ex.Uretprobe(probedSymbol, f.exit, nil)
	if err != nil {
		return probeRun{}, fmt.Errorf("attach the empty uretprobe: %w", err)
	}
	defer ret.Close()
	ent, err := ex.Uprobe(probedSymbol, f.entry, nil)
	if err != nil {
		return probeRun{}, fmt.Errorf("attach the empty uprobe: %w", err)
	}
	defer ent.Close()
	res, err := runBaseline(ctx, w)
	return probeRun{wall: res.wall}, err
}

func (f *floorProbes) close() {
	f.entry.Close()
	f.exit.Close()
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
