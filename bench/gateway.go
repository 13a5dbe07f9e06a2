package main

// Suite gateway: what an OTLP gateway tier needs for many busy nodes.
//
//  1. Capture: a busy node at once (2000 idle processes, 100 execs/s and the
//     runtimes of the busy suite), beside our collector exporting with
//     otlp_grpc (gzip) to the bench's sink for -busy-phase after
//     -busy-settle: its OTLP bytes per minute, CPU and RSS, and the
//     requests it sent, kept as the payloads to replay. With
//     -gateway-payloads DIR the payloads are read from DIR's *.pb files
//     instead (serialized ExportProfilesServiceRequests) and no capture
//     runs.
//  2. Replay: a plain collector built by ocb from bench/gateway-builder.yaml
//     (`otlp` receiver -> `otlp_grpc` exporter, profiles pipeline, nothing
//     else) receives the payloads, gzip-compressed once beforehand, at
//     increasing rates (-gateway-nodes node equivalents, one request per node
//     per 10 s report) for -gateway-step each, and forwards them to the
//     sink. Its CPU (utime+stime of /proc/<pid>/stat) per MB of compressed
//     OTLP received and per node-minute are ratios measured in the run; the
//     steps stop after the first that does not keep up.
//
// The projection multiplies the captured node's bytes per minute by the
// fastest step's CPU seconds per byte.

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

const (
	suiteGateway     = "gateway"
	gatewayInFlight  = 16 // requests the replay keeps outstanding at most
	gatewayTimeout   = 30 * time.Second
	gatewayPayloadGZ = gzip.DefaultCompression
)

// gatewayYAML is the plain gateway's configuration: its otlp receiver on
// the port, its otlp_grpc exporter to the sink (the string), the last %s
// the exporter's compression setting (gatewayCompression).
const gatewayYAML = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  otlp_grpc:
    endpoint: %s
    tls:
      insecure: true
%sservice:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [otlp_grpc]
`

// withOTLPExporter adds an otlp_grpc exporter sending to endpoint to the
// profiles pipeline of a bench collector's configuration (collectorYAML).
func withOTLPExporter(conf, endpoint string) string {
	exporter := fmt.Sprintf("exporters:\n  otlp_grpc:\n    endpoint: %s\n    tls:\n      insecure: true\n", endpoint)
	conf = replaceOnce(conf, "exporters:\n", exporter)
	return replaceOnce(conf, "      receivers: [bpfprofiler]\n      processors: [memory_limiter]\n      exporters: [debug]\n",
		"      receivers: [bpfprofiler]\n      processors: [memory_limiter]\n      exporters: [debug, otlp_grpc]\n")
}

func replaceOnce(s, old, repl string) string {
	i := bytes.Index([]byte(s), []byte(old))
	if i < 0 {
		panic(fmt.Sprintf("bench: %q not in the collector configuration", old))
	}
	return s[:i] + repl + s[i+len(old):]
}

func runGatewaySuite(ctx context.Context, e env) error {
	if e.o.gateway == "" {
		return fmt.Errorf("no gateway binary: pass -gateway or set BPFPROFILER_GATEWAY (`make bench` builds it with `make gateway-collector`)")
	}
	if c := e.o.gatewayCompression; c != "" && c != "none" && c != "gzip" {
		return fmt.Errorf("-gateway-compression must be none or gzip (the sink decodes no other), not %q", c)
	}
	steps, err := parseNodeSteps(e.o.gatewayNodes)
	if err != nil {
		return err
	}
	compression := e.o.gatewayCompression
	if compression == "" {
		compression = "gzip (default)"
	}
	fmt.Printf("== suite gateway: %s (otlp -> otlp_grpc, compression %s) replaying a busy node's OTLP at %v node equivalents, %v each ==\n",
		e.o.gateway, compression, steps, e.o.gatewayStep)
	var node *busyFigures
	var payloads [][]byte
	if e.o.gatewayPayloads != "" {
		if payloads, err = loadPayloads(e.o.gatewayPayloads); err != nil {
			return err
		}
		fmt.Printf("payloads: %d from %s\n", len(payloads), e.o.gatewayPayloads)
	} else {
		f, err := captureBusyNode(ctx, e)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		node, payloads = &f, f.otlp.payloads
		if err := savePayloads(filepath.Join(e.dir, "otlp-payloads"), payloads); err != nil {
			return err
		}
	}
	if len(payloads) == 0 {
		return fmt.Errorf("no OTLP payloads to replay")
	}
	zipped, raw, err := gzipPayloads(payloads)
	if err != nil {
		return err
	}
	var zsize int
	for _, z := range zipped {
		zsize += len(z)
	}
	fmt.Printf("replaying %d payloads: %.1f KiB each uncompressed, %.1f KiB gzip\n",
		len(zipped), float64(raw)/float64(len(zipped))/1024, float64(zsize)/float64(len(zipped))/1024)

	results, err := replayGateway(ctx, e, zipped, steps)
	if err != nil {
		return err
	}
	fmt.Printf("load at the end: %s\n\n", loadAvg())
	printGatewaySteps(os.Stdout, results, busyReportInterval)
	best, ok := bestStep(results)
	if !ok {
		return nil
	}
	if !best.keptUp() {
		fmt.Println("note: no step kept up with its rate; the ratios are the first step's")
	}
	if node != nil {
		fmt.Println()
		printProjection(os.Stdout, *node, best, busyReportInterval)
	}
	return nil
}

// captureBusyNode runs a busy node at once beside our collector and returns
// its figures, the requests it sent among them.
func captureBusyNode(ctx context.Context, e env) (busyFigures, error) {
	var load busyLoad
	defer load.stop()
	if err := raiseLimits(busySleepers); err != nil {
		return busyFigures{}, err
	}
	var err error
	if load.sleepers, err = startSleepers(busySleepers); err != nil {
		return busyFigures{}, err
	}
	load.pacer = startPacer(busyExecRate, "/bin/true")
	rs, notes, err := startRuntimes(e.dir, e.o.busyRuntimes)
	if err != nil {
		return busyFigures{}, err
	}
	load.runtimes = rs
	for _, n := range notes {
		fmt.Println("note: " + n)
	}
	fmt.Printf("capture: %d idle processes, %d execs/s, runtimes %v at once; settling %v, collector measured over %v...\n",
		busySleepers, busyExecRate, rs.names(), e.o.busySettle, e.o.busyPhase)
	if err := waitWindow(ctx, e.o.busySettle, nil); err != nil {
		return busyFigures{}, err
	}
	f, err := measureBusyCollector(ctx, e, load.pacer, nil)
	switch {
	case err != nil && f.peakRSS > 0 && len(f.otlp.payloads) > 0 && ctx.Err() == nil:
		// Measured; what failed came after (on a loaded host, a shutdown
		// flushing its last report can outlast stop's 15 s).
		fmt.Printf("note: capture: %v\n", err)
	case err != nil:
		return f, err
	}
	fmt.Printf("capture: collector CPU %s, peak RSS %.1f MiB, %.1f execs/s\n%s\n",
		fmtCPU(f.cpuTicks, f.cpuSched), mib(f.peakRSS), f.execRate, f.otlp.line())
	for _, n := range rs.dead() {
		fmt.Println("note: " + n)
	}
	return f, nil
}

// replayGateway starts the sink and the gateway and runs the steps.
func replayGateway(ctx context.Context, e env, zipped [][]byte, nodes []int) ([]gatewayStep, error) {
	sink, err := startOTLPSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	gw, err := launchGateway(ctx, e, port, sink.addr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := gw.stop(); err != nil {
			fmt.Printf("note: gateway: %v\n", err)
		}
	}()
	var sent, raw atomic.Int64
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(payloadCounter{wire: &sent, raw: &raw}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.UseCompressor(precompressedName), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var out []gatewayStep
	for _, n := range nodes {
		target := float64(n) / busyReportInterval.Seconds()
		s := gatewayStep{nodes: n, target: target}
		c0, err := readCPU(gw.pid())
		if err != nil {
			return out, err
		}
		f0, w0 := sink.counts(), sent.Load()
		start := time.Now()
		ok, failed, err := paceRequests(ctx, conn, zipped, target, e.o.gatewayStep)
		if err != nil {
			return out, err
		}
		s.elapsed = time.Since(start)
		c1, err := readCPU(gw.pid())
		if err != nil {
			return out, fmt.Errorf("gateway: %w; its last output (%s):\n%s", err, gw.logPath, gw.lastLines(20))
		}
		s.cpuTicks = c1.ticks - c0.ticks
		s.sent = otlpCounts{requests: ok, wireBytes: sent.Load() - w0}
		s.failed, s.forwarded = failed, sink.counts().sub(f0)
		s.peakRSS, _ = readVmHWM(gw.pid())
		fmt.Printf("step %d nodes: %.1f requests/s asked, %.1f answered, %d failed; gateway %.1f%% of a core, %.3f CPU s per MB compressed\n",
			n, target, s.achieved(), failed, 100*ratio(s.cpuSeconds(), s.elapsed.Seconds()), s.cpuPerMB())
		out = append(out, s)
		if !s.keptUp() {
			fmt.Println("the gateway (or this 2-CPU host) did not keep up; no faster step")
			break
		}
	}
	return out, nil
}

// paceRequests sends payloads round-robin at rate per second for d, at most
// gatewayInFlight at once (a request whose time has come waits for a free
// slot, so a slow gateway lowers the rate achieved), and waits for the
// answers.
func paceRequests(ctx context.Context, conn *grpc.ClientConn, payloads [][]byte, rate float64, d time.Duration) (ok, failed int64, err error) {
	md := metadata.Pairs(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	slots := make(chan struct{}, gatewayInFlight)
	var wg sync.WaitGroup
	var nOK, nFailed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if due.Sub(start) >= d {
			break
		}
		if err := waitWindow(ctx, time.Until(due), nil); err != nil {
			wg.Wait()
			return nOK.Load(), nFailed.Load(), err
		}
		slots <- struct{}{}
		wg.Add(1)
		go func(p []byte) {
			defer func() { <-slots; wg.Done() }()
			cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), gatewayTimeout)
			defer cancel()
			if err := conn.Invoke(cctx, profilesExportMethod, &rawMessage{b: p}, &rawMessage{}); err != nil {
				nFailed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			nOK.Add(1)
		}(payloads[i%len(payloads)])
	}
	wg.Wait()
	if e, _ := firstErr.Load().(error); e != nil {
		fmt.Printf("  first failure: %v\n", e)
	}
	return nOK.Load(), nFailed.Load(), nil
}

// launchGateway writes the gateway's configuration and starts it, and
// returns once it is ready.
func launchGateway(ctx context.Context, e env, port int, sink string) (*collector, error) {
	conf := filepath.Join(e.dir, "gateway.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, gatewayYAML, port, sink, gatewayCompression(e.o.gatewayCompression)), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(e.dir, "gateway.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	out := newLineLog(logFile)
	cmd := exec.Command(e.o.gateway, "--config", conf, "--feature-gates=service.profilesSupport")
	cmd.Stdout, cmd.Stderr = out, out
	c := &collector{cmd: cmd, out: out, logPath: logPath, started: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the gateway %s: %w", e.o.gateway, err)
	}
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	if err := c.awaitReady(ctx, collectorConfig{readyTimeout: 60 * time.Second, settle: time.Second}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return c, nil
}

// gatewayCompression is the gateway exporter's compression line for
// -gateway-compression c ("" keeps the default, gzip).
func gatewayCompression(c string) string {
	if c == "" {
		return ""
	}
	return fmt.Sprintf("    compression: %s\n", c)
}

// gzipPayloads compresses each payload once, as an exporter would, and
// returns them with the uncompressed total.
func gzipPayloads(payloads [][]byte) (zipped [][]byte, raw int, err error) {
	for _, p := range payloads {
		var b bytes.Buffer
		zw, err := gzip.NewWriterLevel(&b, gatewayPayloadGZ)
		if err != nil {
			return nil, 0, err
		}
		if _, err := zw.Write(p); err != nil {
			return nil, 0, err
		}
		if err := zw.Close(); err != nil {
			return nil, 0, err
		}
		zipped, raw = append(zipped, b.Bytes()), raw+len(p)
	}
	return zipped, raw, nil
}

// savePayloads writes payloads into dir as NNN.pb (-gateway-payloads reads
// them back; kept with -keep).
func savePayloads(dir string, payloads [][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, p := range payloads {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.pb", i)), p, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// loadPayloads reads dir's *.pb files, in name order.
func loadPayloads(dir string) ([][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pb"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
