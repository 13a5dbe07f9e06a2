// Command backend measures what Grafana Pyroscope shows of the collector's
// OTLP: it runs a Pyroscope binary (built by hand from its release tag,
// never committed) on loopback, the collector host-wide at 99 Hz with
// off-CPU on and 10 s reports exporting to it, and two workloads with known
// answers (cpuburn: two threads burning CPU 3:1 in burn_hot/burn_cold, in a
// fake Kubernetes pod: its cgroup and containerd's bundle file; sleepers on
// the host: sleep_long 30 ms and sleep_short 10 ms, -sleeps times each),
// then reads the totals back through Pyroscope's query API and prints them
// beside the truth the workloads measured themselves, with the export
// failures, series, service names and label names, the pod's labels and the
// pod's total read through its label, the exporter's bytes on the wire and
// the collector's CPU. Each variant (transport x exporter settings x the
// resource attributes on the samples or not) gets a fresh Pyroscope.
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

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
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
	flag.StringVar(&o.variants, "variants", "otlp_grpc/shipped/labels,otlp_http/shipped/labels,otlp_grpc/shipped/bare,otlp_http/shipped/bare",
		"transport/settings/samples triples: otlp_grpc or otlp_http; shipped (deploy/kubernetes/configmap.yaml's timeout, queue and retry) or defaults; "+
			"labels (the resource attributes the ConfigMap puts on the samples) or bare (none)")
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
		parts := strings.Split(strings.TrimSpace(v), "/")
		if len(parts) == 2 {
			parts = append(parts, "bare")
		}
		if len(parts) != 3 || (parts[0] != "otlp_grpc" && parts[0] != "otlp_http") ||
			(parts[1] != "shipped" && parts[1] != "defaults") || (parts[2] != "labels" && parts[2] != "bare") {
			return fmt.Errorf("-variants: %q is not transport/settings/samples", v)
		}
		vr := variant{transport: parts[0], settings: parts[1], labels: parts[2] == "labels"}
		vdir := filepath.Join(dir, fmt.Sprintf("%d-%s", i, strings.Join(parts, "-")))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		fmt.Printf("== %s, %s settings, %s samples\n", parts[0], parts[1], parts[2])
		r, err := measure(ctx, o, bins, vdir, vr)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		r.print()
		results = append(results, r)
	}
	printTable(results)
	return nil
}

// variant is one measurement's transport, exporter settings, and whether
// the resource attributes go on the samples.
type variant struct {
	transport, settings string
	labels              bool
}

// measure runs one variant: a fresh Pyroscope behind a proxy counting the
// exporter's bytes, the collector exporting to it, the workloads (cpuburn in
// a fake pod), then the query.
func measure(ctx context.Context, o options, bins workloads, dir string, v variant) (result, error) {
	r := result{variant: v}
	py, err := startPyroscope(ctx, o.pyroscope, dir)
	if err != nil {
		return r, err
	}
	defer py.stop()
	proxy, err := startProxy(py.grpcAddr)
	if err != nil {
		return r, err
	}
	defer proxy.close()
	hostRoot := filepath.Join(dir, "host")
	pod, err := testutil.WriteFakePod(hostRoot, "checkout")
	if err != nil {
		return r, err
	}
	r.pod = pod
	attrs := ""
	if v.labels {
		attrs = onSamples
	}
	col, err := startCollector(ctx, o.collector, dir, hostRoot, attrs, exporterYAML(v.transport, v.settings, proxy.addr()))
	if err != nil {
		return r, err
	}
	defer func() { _ = col.stop() }()
	began := time.Now()
	cpu0, err := col.cpuTime()
	if err != nil {
		return r, err
	}
	sent0 := proxy.sent.Load()
	truth, err := runWorkloads(ctx, bins, dir, o.burnSeconds, o.sleeps, pod)
	if err != nil {
		return r, err
	}
	r.truth = truth
	r.elapsed = time.Since(began)
	cpu1, err := col.cpuTime()
	if err != nil {
		return r, err
	}
	r.collectorCPU, r.wireBytes = cpu1-cpu0, proxy.sent.Load()-sent0
	// The collector keeps profiling the host while Pyroscope is read:
	// Pyroscope makes data queryable when a later write arrives (it
	// compacts segments older than 36 s on the next write).
	r.seen, err = py.read(ctx, began.Add(-time.Minute), time.Now().Add(time.Minute), pod)
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
