package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"
)

// TestCollectorYAMLProbes loads a probes configuration into the real
// receiver's config type and checks the logs pipeline is declared.
func TestCollectorYAMLProbes(t *testing.T) {
	dir := t.TempDir()
	fileMatch := `^/tmp/bench 'x'/probe\.loop$`
	p := profileConfig{probes: []benchProbe{{id: "bench.call", fileMatch: fileMatch, symbol: "probed_call", minDuration: time.Second}}}
	path := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(path, []byte(collectorYAML(p, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	cm, err := confmaptest.LoadConf(path)
	if err != nil {
		t.Fatalf("generated YAML does not parse: %v\n%s", err, collectorYAML(p, dir))
	}
	sub, err := cm.Sub("receivers::bpfprofiler")
	if err != nil {
		t.Fatal(err)
	}
	cfg := bpfprofilerreceiver.NewFactory().CreateDefaultConfig().(*bpfprofilerreceiver.Config)
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatalf("receiver rejects the generated config: %v", err)
	}
	if err := confmap.Validate(cfg); err != nil {
		t.Fatalf("generated config does not validate: %v", err)
	}
	want := bpfprofilerreceiver.ProbeConfig{ID: "bench.call", FileMatch: fileMatch, Symbol: "probed_call", MinDuration: time.Second}
	if cfg.CPU.Enabled || cfg.OffCPU.Enabled || len(cfg.Probes) != 1 {
		t.Fatalf("cpu %v, off_cpu %v, probes %+v; want both disabled and %+v", cfg.CPU.Enabled, cfg.OffCPU.Enabled, cfg.Probes, want)
	}
	// No rate limit: every call is a record.
	if got := cfg.Probes[0]; got.MaxPerSecond == nil || *got.MaxPerSecond != 0 {
		t.Errorf("probe max_per_second %v, want 0 (no limit)", got.MaxPerSecond)
	}
	got := cfg.Probes[0]
	got.MaxPerSecond = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("probe %+v, want %+v", got, want)
	}
	if got := cm.Get("service::pipelines::logs::receivers"); got == nil {
		t.Errorf("no logs pipeline:\n%s", collectorYAML(p, dir))
	}
	if got := cm.Get("service::telemetry::logs::sampling::enabled"); got != false {
		t.Errorf("log sampling enabled = %v, want false (the bench counts the debug exporter's lines)", got)
	}
	if strings.Contains(collectorYAML(profileConfig{cpuHz: 99}, dir), "logs:") {
		t.Error("logs pipeline without probes")
	}
}

func TestYAMLQuote(t *testing.T) {
	for in, want := range map[string]string{"": "''", `^a\.b$`: `'^a\.b$'`, "it's": "'it''s'"} {
		if got := yamlQuote(in); got != want {
			t.Errorf("yamlQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestNsPerCall(t *testing.T) {
	if got := nsPerCall(2*time.Millisecond, 1000); got != 2000 {
		t.Errorf("nsPerCall(2ms, 1000) = %v, want 2000", got)
	}
	if got := nsPerCall(time.Second, 0); got != 0 {
		t.Errorf("nsPerCall(1s, 0) = %v, want 0", got)
	}
}

func TestAttachedUprobes(t *testing.T) {
	log := "2025-01-01T00:00:00.000Z\tinfo\tbpfprofilerreceiver/receiver.go:150\tbpfprofiler started\t{\"cpu\": false}\n" +
		"2025-01-01T00:00:00.000Z\tinfo\tbpfprofilerreceiver/probes.go:46\tprobes attached\t{\"probes\": 1, \"files\": 1, \"uprobes\": 2, \"missing_symbols\": 0, \"refused\": 0}\n"
	if n, ok := attachedUprobes(log); !ok || n != 2 {
		t.Errorf("attachedUprobes = %d, %v; want 2, true", n, ok)
	}
	if n, ok := attachedUprobes(`{"level":"info","msg":"probes attached","probes":1,"files":0,"uprobes":0}`); !ok || n != 0 {
		t.Errorf("attachedUprobes(json) = %d, %v; want 0, true", n, ok)
	}
	if _, ok := attachedUprobes("info\tEverything is ready.\n"); ok {
		t.Error("attachedUprobes found a line that is not there")
	}
}

func TestLogRecordsLogged(t *testing.T) {
	log := "info\tLogs\t{\"otelcol.component.id\": \"debug\", \"resource logs\": 1, \"log records\": 1024}\n" +
		"info\tProfiles\t{\"resource profiles\": 1, \"sample records\": 7}\n" +
		"info\tLogs\t{\"resource logs\": 2, \"log records\": 76}\n"
	if got := logRecordsLogged(log); got != 1100 {
		t.Errorf("logRecordsLogged = %d, want 1100", got)
	}
	if got := logRecordsLogged(""); got != 0 {
		t.Errorf("logRecordsLogged(\"\") = %d", got)
	}
}

func TestHistCount(t *testing.T) {
	out := "Attaching 2 probes...\n\n\n@d: \n" +
		"[16K, 32K)        193783 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n" +
		"[32K, 64K)          4701 |@                                                   |\n" +
		"[8M, 16M)              3 |                                                    |\n" +
		"[0]                    2 |                                                    |\n\n"
	if got := histCount(out); got != 193783+4701+3+2 {
		t.Errorf("histCount = %d, want %d", got, 193783+4701+3+2)
	}
	if got := histCount("Attaching 2 probes...\n"); got != 0 {
		t.Errorf("histCount(no map) = %d", got)
	}
}

func TestBpftraceError(t *testing.T) {
	stderr := "probeloop: cpu_ns 5\nERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace.\n" +
		"open(/sys/kernel/tracing/uprobe_events): No such file or directory\n" +
		"ERROR: failed to detach probe: uretprobe:/tmp/probeloop:probed_call\n"
	if got := bpftraceError(stderr); got != "ERROR: failed to detach probe: uretprobe:/tmp/probeloop:probed_call" {
		t.Errorf("bpftraceError = %q", got)
	}
	if got := bpftraceError("ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace\n"); got != "" {
		t.Errorf("bpftraceError(memlock only) = %q", got)
	}
}

func TestBpftraceScript(t *testing.T) {
	want := "uprobe:/x/probeloop:probed_call { @s[tid] = nsecs; } uretprobe:/x/probeloop:probed_call" +
		" /@s[tid]/ { @d = hist(nsecs - @s[tid]); delete(@s[tid]); }"
	if got := bpftraceScript("/x/probeloop"); got != want {
		t.Errorf("bpftraceScript = %q\nwant %q", got, want)
	}
}

func TestProbeReport(t *testing.T) {
	r := newProbeReport([]string{scNoProbe, scOurs, scOursFilter, scBpftrace, scFloor, scGoNoProbe, scGoOurs, scGoServer, scGoServerProbed}, 1000, 100)
	// ns/call: no probe 2, ours 1202 / 1102, bpftrace 2002, floor 1002;
	// the Go workload 5 alone, 1505 probed.
	for _, shift := range []time.Duration{0, 1000, -1000} {
		r.add(map[string]time.Duration{
			scNoProbe:    2*time.Microsecond + shift,
			scOurs:       1202*time.Microsecond + shift,
			scOursFilter: 1102*time.Microsecond + shift,
			scBpftrace:   2002*time.Microsecond + shift,
			scFloor:      1002*time.Microsecond + shift,
			scGoNoProbe:  5*time.Microsecond + shift,
			scGoOurs:     1505*time.Microsecond + shift,
			// 100 requests: 50 µs a request alone, 80 probed.
			scGoServer:       5000*time.Microsecond + shift,
			scGoServerProbed: 8000*time.Microsecond + shift,
		})
	}
	if got := median(r.overhead[scOurs]); got != 1200 {
		t.Errorf("overhead of ours = %v, want 1200", got)
	}
	if x, ok := r.ratio(r.overhead, scOursFilter, scFloor); !ok || x != 1.1 {
		t.Errorf("filtered / floor overhead = %v, %v; want 1.1", x, ok)
	}
	var b bytes.Buffer
	r.print(&b)
	out := b.String()
	for _, want := range []string{
		"our probe ≤ bpftrace (min_duration 0): yes",
		"our probe ≤ 1.1× floor (overhead, min_duration 0): no (overhead/call 1200 ns vs 1000 ns, ratio 1.200)",
		"our probe ≤ 1.1× floor (overhead, min_duration 1s): yes",
		"Go probe / C probe (overhead per call, every call a record): 1.250 (1500 ns vs 1200 ns)",
		"Go server throughput, probe on its handler / no probe (every request a record): 0.625 (12500 vs 20000 requests/s, 8 clients)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	partial := newProbeReport([]string{scNoProbe, scOurs}, 10, 10)
	partial.add(map[string]time.Duration{scNoProbe: time.Microsecond, scOurs: 2 * time.Microsecond})
	b.Reset()
	partial.print(&b)
	if !strings.Contains(b.String(), "our probe ≤ bpftrace (min_duration 0): n/a") || strings.Contains(b.String(), "min_duration 1s") {
		t.Errorf("partial report:\n%s", b.String())
	}
}
