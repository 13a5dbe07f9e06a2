package main

// The context suite: what reading what processes publish costs a sample.
// Each workload runs twice at once (both CPUs busy, so nearly every sample
// is one of theirs) under two collectors at once, both sampling it at 99
// Hz, one with the readers on (trace_context and go_labels enabled) and
// one with them off: the CPU sampler's BPF run time per sample (kernel BPF
// statistics) and each collector's CPU are compared within one window, so
// that the machine's drift between windows (on a VM, a sample's cost
// moves by microseconds with the state of its caches) falls on both. The
// collectors start in alternating order, round by round.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

const suiteContext = "context"

// contextWorkload is a program measured with the readers on and off.
type contextWorkload struct {
	name string
	argv []string // its seconds are appended
}

// contextFigures are one run's: sampler ns per sample, collector CPU.
type contextFigures struct {
	samplerNs, cpu float64
}

// contextWindow is how long one run is measured, after the collector's
// settle (its start-up and the workloads' first report left out).
const contextWindow = 15 * time.Second

func runContextSuite(ctx context.Context, e env) error {
	spans, golabels, plain := filepath.Join(e.dir, "spans"), filepath.Join(e.dir, "golabels"), filepath.Join(e.dir, "cpuburn")
	if err := testutil.CompileC("testdata/workloads/spans.c", spans); err != nil {
		return err
	}
	if err := testutil.CompileC("testdata/workloads/cpuburn.c", plain); err != nil {
		return err
	}
	if err := testutil.CrossBuildGo("testdata/workloads/golabels", golabels, "amd64", testutil.GoBuild{LDFlags: "-s -w"}); err != nil {
		return err
	}
	workloads := []contextWorkload{
		{"OpenTelemetry thread context (spans.c: a span record with an attribute)", []string{spans}},
		{"Go labels (golabels: 1 or 2 labels)", []string{golabels}},
		{"nothing published (cpuburn.c)", []string{plain}},
	}
	stats, err := enableBPFStats()
	if err != nil {
		return err
	}
	defer stats.Close()
	fmt.Printf("context suite: 99 Hz, %v windows, %d rounds, two of each workload at once under two collectors, readers off and on\n", contextWindow, e.o.rounds)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "workload\tns/sample off (rounds)\tns/sample on (rounds)\tadded (rounds' on - off: median, min-max)\tcollector CPU off\ton")
	for _, wl := range workloads {
		var on, off []contextFigures
		for r := range e.o.rounds {
			fOff, fOn, err := runContextPair(ctx, e, wl, r%2 == 1)
			if err != nil {
				return fmt.Errorf("%s: %w", wl.name, err)
			}
			off, on = append(off, fOff), append(on, fOn)
		}
		ns := func(f contextFigures) float64 { return f.samplerNs }
		cpu := func(f contextFigures) float64 { return f.cpu }
		added := make([]float64, len(on)) // within each round's window
		for i := range on {
			added[i] = on[i].samplerNs - off[i].samplerNs
		}
		same := func(x float64) float64 { return x }
		fmt.Fprintf(w, "%s\t%.0f (%s)\t%.0f (%s)\t%+.0f ns (%+.0f to %+.0f)\t%.2f%%\t%.2f%%\n", wl.name, medianOf(off, ns), spread(off, ns),
			medianOf(on, ns), spread(on, ns), medianOf(added, same), slices.Min(added), slices.Max(added), medianOf(off, cpu), medianOf(on, cpu))
	}
	return w.Flush()
}

// runContextPair runs two of wl's processes under two collectors at once,
// the readers off in one and on in the other (started first when onFirst),
// and measures contextWindow of both.
func runContextPair(ctx context.Context, e env, wl contextWorkload, onFirst bool) (off, on contextFigures, err error) {
	seconds := fmt.Sprint((2*e.o.settle + contextWindow + 90*time.Second).Seconds())
	var pids []string
	for range 2 {
		cmd := exec.CommandContext(ctx, wl.argv[0], append(slices.Clone(wl.argv[1:]), seconds)...)
		if err := cmd.Start(); err != nil {
			return off, on, err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		pids = append(pids, fmt.Sprint(cmd.Process.Pid))
	}
	type side struct {
		readers bool
		c       *collector
		ids     map[ebpf.ProgramID]bool
		rt0     time.Duration
		runs0   uint64
		cpu0    cpuSample
	}
	sides := []*side{{readers: false}, {readers: true}}
	if onFirst {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for _, s := range sides {
		before := samplerProgramIDs()
		p := profileConfig{cpuHz: 99, noContext: !s.readers, targetPIDs: strings.Join(pids, ", ")}
		if s.c, err = startCollector(ctx, e.collector(p)); err != nil {
			return off, on, err
		}
		defer func() { _ = s.c.stop() }()
		s.ids = samplerProgramIDs()
		for id := range before {
			delete(s.ids, id)
		}
		if len(s.ids) == 0 {
			return off, on, fmt.Errorf("the collector with readers %t loaded no CPU sampler", s.readers)
		}
	}
	for _, s := range sides {
		s.rt0, s.runs0 = samplerStatsOf(s.ids)
		if s.cpu0, err = readCPU(s.c.pid()); err != nil {
			return off, on, err
		}
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return off, on, ctx.Err()
	case <-time.After(contextWindow):
	}
	for _, s := range sides {
		rt, runs := samplerStatsOf(s.ids)
		cpu1, err := readCPU(s.c.pid())
		if err != nil {
			return off, on, err
		}
		if runs <= s.runs0 {
			return off, on, fmt.Errorf("no CPU sample ran in %v (readers %t)", contextWindow, s.readers)
		}
		ticks, _ := cpuPercent(s.cpu0, cpu1, time.Since(start))
		f := contextFigures{samplerNs: float64((rt - s.rt0).Nanoseconds()) / float64(runs-s.runs0), cpu: ticks}
		if s.readers {
			on = f
		} else {
			off = f
		}
	}
	return off, on, nil
}

// spread is the rounds' range of f, "min-max".
func spread[T any](xs []T, f func(T) float64) string {
	if len(xs) == 0 {
		return "-"
	}
	lo, hi := f(xs[0]), f(xs[0])
	for _, x := range xs[1:] {
		lo, hi = min(lo, f(x)), max(hi, f(x))
	}
	return fmt.Sprintf("%.0f-%.0f", lo, hi)
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}
