package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestExportRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64, b int64) otlpEvent {
		return otlpEvent{at: t0.Add(time.Duration(s * float64(time.Second))), wireBytes: b}
	}
	tests := []struct {
		name      string
		events    []otlpEvent
		bytes     []int64 // per export
		exportMin float64
		ok        bool
	}{
		{"none", nil, nil, 0, false},
		{"one export", []otlpEvent{at(3, 100)}, []int64{100}, 0, false},
		{"one export in two requests", []otlpEvent{at(3, 100), at(3.5, 50)}, []int64{150}, 0, false},
		{"three exports 10 s apart", []otlpEvent{at(0, 100), at(10, 200), at(20, 300)}, []int64{100, 200, 300}, 6, true},
		// Jitter: 9 s then 11 s, the span is still 20 s.
		{"jittered", []otlpEvent{at(1, 999), at(10, 200), at(21, 300)}, []int64{999, 200, 300}, 6, true},
		// A report split into two requests 1 s apart is one export.
		{"split export", []otlpEvent{at(0, 100), at(10, 150), at(11, 50), at(20, 300)}, []int64{100, 200, 300}, 6, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, bytes := exportBursts(tt.events); !slices.Equal(bytes, tt.bytes) {
				t.Errorf("exportBursts bytes = %v, want %v", bytes, tt.bytes)
			}
			n, ok := exportRate(tt.events)
			if ok != tt.ok || !approx(n, tt.exportMin) {
				t.Errorf("exportRate = %v, %v; want %v, %v", n, ok, tt.exportMin, tt.ok)
			}
		})
	}
}

func TestOTLPWindowRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name                    string
		w                       otlpWindow
		bytesMin, perMin, compr float64
	}{
		{
			// Mean export 200 bytes, 6 reports a minute.
			name: "three exports",
			w: otlpWindow{counts: otlpCounts{requests: 3, wireBytes: 600, rawBytes: 1800}, elapsed: 30 * time.Second, interval: 10 * time.Second,
				events: []otlpEvent{{sec(0), 100}, {sec(10), 200}, {sec(20), 300}}},
			bytesMin: 1200, perMin: 6, compr: 3,
		},
		{
			// A late report: 4 exports seen in 30 s, still 6 a minute.
			name: "a late report",
			w: otlpWindow{counts: otlpCounts{requests: 4, wireBytes: 800, rawBytes: 1600}, elapsed: 30 * time.Second, interval: 10 * time.Second,
				events: []otlpEvent{{sec(5), 200}, {sec(10), 200}, {sec(20), 200}, {sec(30), 200}}},
			bytesMin: 1200, perMin: 7.2, compr: 2,
		},
		{
			name:     "one export",
			w:        otlpWindow{counts: otlpCounts{requests: 1, wireBytes: 500, rawBytes: 1000}, elapsed: 30 * time.Second, interval: 10 * time.Second, events: []otlpEvent{{t0, 500}}},
			bytesMin: 3000, perMin: 2, compr: 2,
		},
		{
			name:     "no interval: the window",
			w:        otlpWindow{counts: otlpCounts{requests: 1, wireBytes: 500, rawBytes: 1000}, elapsed: 30 * time.Second, events: []otlpEvent{{t0, 500}}},
			bytesMin: 1000, perMin: 2, compr: 2,
		},
		{name: "empty", w: otlpWindow{interval: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.bytesPerMinute(); !approx(got, tt.bytesMin) {
				t.Errorf("bytesPerMinute = %v, want %v", got, tt.bytesMin)
			}
			if got := tt.w.exportsPerMinute(); !approx(got, tt.perMin) {
				t.Errorf("exportsPerMinute = %v, want %v", got, tt.perMin)
			}
			if got := tt.w.compression(); !approx(got, tt.compr) {
				t.Errorf("compression = %v, want %v", got, tt.compr)
			}
		})
	}
}

func TestGatewayStepRatios(t *testing.T) {
	tests := []struct {
		name              string
		s                 gatewayStep
		perMB, perNodeMin float64
		keptUp            bool
	}{
		{
			// 50 ticks = 0.5 CPU s over 2 MB and 120 requests (20 node-minutes).
			name:  "kept up",
			s:     gatewayStep{target: 6, elapsed: 20 * time.Second, sent: otlpCounts{requests: 120, wireBytes: 2e6}, cpuTicks: 50},
			perMB: 0.25, perNodeMin: 0.025, keptUp: true,
		},
		{
			name:  "too slow",
			s:     gatewayStep{target: 10, elapsed: 20 * time.Second, sent: otlpCounts{requests: 120, wireBytes: 2e6}, cpuTicks: 50},
			perMB: 0.25, perNodeMin: 0.025, keptUp: false,
		},
		{
			name:  "a failure",
			s:     gatewayStep{target: 6, elapsed: 20 * time.Second, sent: otlpCounts{requests: 120, wireBytes: 2e6}, cpuTicks: 50, failed: 1},
			perMB: 0.25, perNodeMin: 0.025, keptUp: false,
		},
		{name: "nothing sent", s: gatewayStep{target: 6, elapsed: time.Second}, keptUp: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.cpuPerMB(); !approx(got, tt.perMB) {
				t.Errorf("cpuPerMB = %v, want %v", got, tt.perMB)
			}
			if got := tt.s.cpuPerNodeMinute(10 * time.Second); !approx(got, tt.perNodeMin) {
				t.Errorf("cpuPerNodeMinute = %v, want %v", got, tt.perNodeMin)
			}
			if got := tt.s.keptUp(); got != tt.keptUp {
				t.Errorf("keptUp = %v, want %v", got, tt.keptUp)
			}
		})
	}
}

func TestGatewayCores(t *testing.T) {
	tests := []struct {
		bytesPerNodeMin float64
		nodes           int
		cpuPerMB, cores float64
	}{
		// 600 kB/min x 10,000 nodes = 100 MB/s; at 0.25 CPU s/MB, 25 cores.
		{600e3, 10000, 0.25, 25},
		{600e3, 1, 0.25, 0.0025},
		{0, 10000, 0.25, 0},
		{1e6, 60, 1, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v B/min x %d at %v", tt.bytesPerNodeMin, tt.nodes, tt.cpuPerMB), func(t *testing.T) {
			if got := gatewayCores(tt.bytesPerNodeMin, tt.nodes, tt.cpuPerMB); !approx(got, tt.cores) {
				t.Errorf("gatewayCores = %v, want %v", got, tt.cores)
			}
		})
	}
}

func TestBestStep(t *testing.T) {
	step := func(nodes int, target float64, requests int64) gatewayStep {
		return gatewayStep{nodes: nodes, target: target, elapsed: 10 * time.Second, sent: otlpCounts{requests: requests}}
	}
	tests := []struct {
		name   string
		steps  []gatewayStep
		nodes  int
		wantOK bool
	}{
		{"none", nil, 0, false},
		{"the fastest that kept up", []gatewayStep{step(100, 10, 100), step(300, 30, 300), step(1000, 100, 400)}, 300, true},
		{"none kept up: the first", []gatewayStep{step(100, 10, 50), step(300, 30, 60)}, 100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := bestStep(tt.steps)
			if ok != tt.wantOK || got.nodes != tt.nodes {
				t.Errorf("bestStep = %d nodes, %v; want %d, %v", got.nodes, ok, tt.nodes, tt.wantOK)
			}
		})
	}
}

func TestParseNodeSteps(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"100,300,1000", []int{100, 300, 1000}, false},
		{" 50 , 100 ", []int{50, 100}, false},
		{"7", []int{7}, false},
		{"", nil, true},
		{"100,,300", nil, true},
		{"0,100", nil, true},
		{"-5", nil, true},
		{"300,100", nil, true},
		{"100,100", nil, true},
		{"1k", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseNodeSteps(tt.in)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("parseNodeSteps(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCollectorYAMLWithOTLPExporter(t *testing.T) {
	p := profileConfig{cpuHz: 99, reportInterval: 10 * time.Second, otlpEndpoint: "127.0.0.1:4317"}
	path := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(path, []byte(collectorYAML(p, "/tmp/p")), 0o644); err != nil {
		t.Fatal(err)
	}
	cm, err := confmaptest.LoadConf(path)
	if err != nil {
		t.Fatalf("generated YAML does not parse: %v\n%s", err, collectorYAML(p, "/tmp/p"))
	}
	if got := cm.Get("exporters::otlp_grpc::endpoint"); got != "127.0.0.1:4317" {
		t.Errorf("otlp_grpc endpoint = %v", got)
	}
	if got := cm.Get("exporters::otlp_grpc::tls::insecure"); got != true {
		t.Errorf("otlp_grpc tls::insecure = %v", got)
	}
	if got := cm.Get("exporters::otlp_grpc::compression"); got != nil {
		t.Errorf("otlp_grpc compression = %v, want the default (gzip)", got)
	}
	if got := fmt.Sprint(cm.Get("service::pipelines::profiles::exporters")); got != "[debug otlp_grpc]" {
		t.Errorf("profiles exporters = %v", got)
	}
	// Without an endpoint, no otlp_grpc exporter.
	p.otlpEndpoint = ""
	if conf := collectorYAML(p, "/tmp/p"); strings.Contains(conf, "otlp_grpc") {
		t.Errorf("otlp_grpc without an endpoint:\n%s", conf)
	}
}

func TestGatewayYAML(t *testing.T) {
	for _, tt := range []struct{ flag, want string }{{"", "<nil>"}, {"gzip", "gzip"}, {"none", "none"}} {
		t.Run(tt.flag, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, fmt.Appendf(nil, gatewayYAML, 4317, "127.0.0.1:9999", gatewayCompression(tt.flag)), 0o644); err != nil {
				t.Fatal(err)
			}
			cm, err := confmaptest.LoadConf(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Get("receivers::otlp::protocols::grpc::endpoint"); got != "127.0.0.1:4317" {
				t.Errorf("receiver endpoint = %v", got)
			}
			if got := cm.Get("exporters::otlp_grpc::endpoint"); got != "127.0.0.1:9999" {
				t.Errorf("exporter endpoint = %v", got)
			}
			if got := fmt.Sprint(cm.Get("exporters::otlp_grpc::compression")); got != tt.want {
				t.Errorf("exporter compression = %v, want %v", got, tt.want)
			}
			if got := fmt.Sprint(cm.Get("service::pipelines::profiles::exporters")); got != "[otlp_grpc]" {
				t.Errorf("profiles exporters = %v", got)
			}
		})
	}
}

// TestSinkCountsPrecompressedReplay sends gzipped payloads the way the
// gateway replay does, straight to a sink: it gets them back uncompressed,
// counted compressed and uncompressed.
func TestSinkCountsPrecompressedReplay(t *testing.T) {
	sink, err := startOTLPSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	sink.record(true)
	payloads := [][]byte{[]byte("first payload, first payload, first payload"), []byte("second")}
	zipped, raw, err := gzipPayloads(payloads)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(sink.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.UseCompressor(precompressedName)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	for _, z := range zipped {
		if err := conn.Invoke(ctx, profilesExportMethod, &rawMessage{b: z}, &rawMessage{}); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.payloads()
	if len(got) != 2 || string(got[0]) != string(payloads[0]) || string(got[1]) != string(payloads[1]) {
		t.Fatalf("sink kept %q, want %q", got, payloads)
	}
	c := sink.counts()
	// grpc's wire length counts each message's 5-byte prefix too.
	wire := int64(len(zipped[0]) + len(zipped[1]) + 2*5)
	if c.requests != 2 || c.rawBytes != int64(raw) || c.wireBytes != wire || c.connBytes <= wire {
		t.Errorf("counts = %+v, want 2 requests, %d raw bytes, %d wire bytes, more on the connection", c, raw, wire)
	}
	events := sink.eventsSince(time.Time{})
	if len(events) != 2 || events[0].wireBytes != int64(len(zipped[0])+5) || events[1].wireBytes != int64(len(zipped[1])+5) {
		t.Errorf("events = %+v", events)
	}
}
