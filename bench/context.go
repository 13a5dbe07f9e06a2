package main

// The context suite: what reading what processes publish costs a sample.
// Each workload runs twice at once (both CPUs busy, so nearly every sample
// is one of theirs) under a collector sampling at 99 Hz with the readers
// on (trace_context and go_labels enabled) and off; the CPU sampler's BPF
// run time per sample (kernel BPF statistics) and the collector's CPU are
// compared between the two, in rounds of alternating order.

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
	fmt.Printf("context suite: 99 Hz, %v windows, %d rounds, two of each workload at once\n", contextWindow, e.o.rounds)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "workload\tns/sample off (rounds)\tns/sample on (rounds)\tadded (medians)\tcollector CPU off\ton")
	for _, wl := range workloads {
		var on, off []contextFigures
		for r := range e.o.rounds {
			for _, readers := range rotated([]bool{false, true}, r) {
				f, err := runContextOnce(ctx, e, wl, readers)
				if err != nil {
					return fmt.Errorf("%s: %w", wl.name, err)
				}
				if readers {
					on = append(on, f)
				} else {
					off = append(off, f)
				}
			}
		}
		ns := func(f contextFigures) float64 { return f.samplerNs }
		cpu := func(f contextFigures) float64 { return f.cpu }
		nsOff, nsOn := medianOf(off, ns), medianOf(on, ns)
		fmt.Fprintf(w, "%s\t%.0f (%s)\t%.0f (%s)\t%+.0f ns\t%.2f%%\t%.2f%%\n", wl.name, nsOff, spread(off, ns), nsOn, spread(on, ns),
			nsOn-nsOff, medianOf(off, cpu), medianOf(on, cpu))
	}
	return w.Flush()
}

// runContextOnce runs two of wl's processes under a collector with the
// readers on or off and measures contextWindow of it.
func runContextOnce(ctx context.Context, e env, wl contextWorkload, readers bool) (contextFigures, error) {
	seconds := fmt.Sprint((e.o.settle + contextWindow + 60*time.Second).Seconds())
	var pids []string
	for range 2 {
		cmd := exec.CommandContext(ctx, wl.argv[0], append(slices.Clone(wl.argv[1:]), seconds)...)
		if err := cmd.Start(); err != nil {
			return contextFigures{}, err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		pids = append(pids, fmt.Sprint(cmd.Process.Pid))
	}
	p := profileConfig{cpuHz: 99, noContext: !readers, targetPIDs: strings.Join(pids, ", ")}
	c, err := startCollector(ctx, e.collector(p))
	if err != nil {
		return contextFigures{}, err
	}
	defer func() { _ = c.stop() }()
	rt0, runs0, _ := samplerStats()
	cpu0, err := readCPU(c.pid())
	if err != nil {
		return contextFigures{}, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return contextFigures{}, ctx.Err()
	case <-time.After(contextWindow):
	}
	rt, runs, _ := samplerStats()
	cpu1, err := readCPU(c.pid())
	if err != nil {
		return contextFigures{}, err
	}
	if runs <= runs0 {
		return contextFigures{}, fmt.Errorf("no CPU sample ran in %v", contextWindow)
	}
	ticks, _ := cpuPercent(cpu0, cpu1, time.Since(start))
	return contextFigures{samplerNs: float64((rt - rt0).Nanoseconds()) / float64(runs-runs0), cpu: ticks}, nil
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
