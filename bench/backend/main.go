// Command backend measures what Grafana Pyroscope shows of the collector's
// OTLP: it runs a Pyroscope binary (built by hand from its release tag,
// never committed) on loopback, the collector host-wide at 99 Hz with
// off-CPU on and 10 s reports exporting to it, and two workloads with known
// answers (cpuburn: two threads burning CPU 3:1 in burn_hot/burn_cold;
// sleepers: sleep_long 30 ms and sleep_short 10 ms, -sleeps times each), then
// reads the totals back through Pyroscope's query API and prints them beside
// the truth the workloads measured themselves, with the export failures,
// series and service names. Each variant (transport x exporter settings) gets
// a fresh Pyroscope.
//
//	go run ./bench/backend -pyroscope /tmp/pyroscope/pyroscope -collector _build/otelcol-bpfprofiler
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	pyroscope, collector string
	variants             string
	sleeps               int
	burnSeconds          int
	keep                 bool
}

func main() {
	var o options
	flag.StringVar(&o.pyroscope, "pyroscope", "", "the Pyroscope binary (single binary, -target=all)")
	flag.StringVar(&o.collector, "collector", os.Getenv("BPFPROFILER_COLLECTOR"), "the collector binary")
	flag.StringVar(&o.variants, "variants", "otlp_grpc/shipped,otlp_http/shipped,otlp_grpc/defaults,otlp_http/defaults",
		"transport/settings pairs: otlp_grpc or otlp_http, shipped (deploy/kubernetes/configmap.yaml's timeout, queue and retry) or defaults")
	flag.IntVar(&o.sleeps, "sleeps", 2000, "sleeps of each sleepers thread (sleep_long 30 ms, sleep_short 10 ms)")
	flag.IntVar(&o.burnSeconds, "burn", 60, "seconds cpuburn runs")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory")
	flag.Parse()
	if o.pyroscope == "" || o.collector == "" {
		fmt.Fprintln(os.Stderr, "backend: -pyroscope and -collector (or BPFPROFILER_COLLECTOR) are required")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "bpfprofiler-backend-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("scratch directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bins, err := buildWorkloads(dir)
	if err != nil {
		return err
	}
	var results []result
	for i, v := range strings.Split(o.variants, ",") {
		transport, settings, ok := strings.Cut(strings.TrimSpace(v), "/")
		if !ok || (transport != "otlp_grpc" && transport != "otlp_http") || (settings != "shipped" && settings != "defaults") {
			return fmt.Errorf("-variants: %q is not transport/settings", v)
		}
		vdir := filepath.Join(dir, fmt.Sprintf("%d-%s-%s", i, transport, settings))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		fmt.Printf("== %s, %s settings\n", transport, settings)
		r, err := measure(ctx, o, bins, vdir, transport, settings)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", transport, settings, err)
		}
		r.print()
		results = append(results, r)
	}
	printTable(results)
	return nil
}

// measure runs one variant: a fresh Pyroscope, the collector exporting to
// it, the workloads, then the query.
func measure(ctx context.Context, o options, bins workloads, dir, transport, settings string) (result, error) {
	r := result{transport: transport, settings: settings}
	py, err := startPyroscope(ctx, o.pyroscope, dir)
	if err != nil {
		return r, err
	}
	defer py.stop()

	col, err := startCollector(ctx, o.collector, dir, exporterYAML(transport, settings, py))
	if err != nil {
		return r, err
	}
	defer func() { _ = col.stop() }()
	began := time.Now()
	truth, err := runWorkloads(ctx, bins, dir, o.burnSeconds, o.sleeps)
	if err != nil {
		return r, err
	}
	r.truth = truth
	// The collector keeps profiling the host while Pyroscope is read:
	// Pyroscope makes data queryable when a later write arrives (it
	// compacts segments older than 36 s on the next write).
	r.seen, err = py.read(ctx, began.Add(-time.Minute), time.Now().Add(time.Minute))
	if err != nil {
		return r, err
	}
	r.exporter = col.exporterMetrics()
	if err := col.stop(); err != nil {
		return r, err
	}
	r.exportFailures = col.count("Exporting failed")
	return r, nil
}
