package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap/confmaptest"
)

const promFixture = `# HELP otelcol_bpfprofiler_unwind_walks_total Samples walked.
# TYPE otelcol_bpfprofiler_unwind_walks_total counter
otelcol_bpfprofiler_unwind_walks_total{kind="cpu",otel_scope_name="github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver",reason="root"} 1200
otelcol_bpfprofiler_unwind_walks_total{kind="off_cpu",otel_scope_name="x",reason="root"} 300
otelcol_bpfprofiler_unwind_walks_total{kind="cpu",otel_scope_name="x",reason="no_mapping"} 7
otelcol_bpfprofiler_unwind_tables_failed_total{otel_scope_name="x",reason="open_failed"} 2
otelcol_bpfprofiler_unwind_tables{otel_scope_name="x"} 41
otelcol_bpfprofiler_unwind_table_bytes{otel_scope_name="x"} 1.048576e+06
otelcol_bpfprofiler_unwind_tables_other{otel_scope_name="x"} 99
weird{a="quote \" and, comma} brace",b="back\\slash"} 3 1700000000000

not a sample line
`

func TestParsePromText(t *testing.T) {
	samples, err := parsePromText(strings.NewReader(promFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 8 {
		t.Fatalf("got %d samples, want 8: %+v", len(samples), samples)
	}
	walks := promByLabel(samples, "otelcol_bpfprofiler_unwind_walks", "reason")
	if want := map[string]float64{"root": 1500, "no_mapping": 7}; !maps.Equal(walks, want) {
		t.Errorf("walks by reason = %v, want %v", walks, want)
	}
	failed := promByLabel(samples, "otelcol_bpfprofiler_unwind_tables_failed", "reason")
	if want := map[string]float64{"open_failed": 2}; !maps.Equal(failed, want) {
		t.Errorf("failed by reason = %v, want %v", failed, want)
	}
	// unwind_tables must not take in unwind_tables_other or _failed.
	if got := promSum(samples, "otelcol_bpfprofiler_unwind_tables"); got != 41 {
		t.Errorf("unwind_tables = %v, want 41", got)
	}
	if got := promSum(samples, "otelcol_bpfprofiler_unwind_table_bytes"); got != 1<<20 {
		t.Errorf("unwind_table_bytes = %v, want %d", got, 1<<20)
	}
	w := samples[len(samples)-1]
	if w.name != "weird" || w.value != 3 || w.labels["a"] != `quote " and, comma} brace` || w.labels["b"] != `back\slash` {
		t.Errorf("escaped labels: got %+v", w)
	}
}

func TestParsePromLineRejects(t *testing.T) {
	for _, line := range []string{"", "{a=\"b\"} 1", "name", "name{a=\"b\" 1", "name{a=b} 1", "name{a=\"b\"}", "name one"} {
		if s, ok := parsePromLine(line); ok {
			t.Errorf("parsePromLine(%q) = %+v, want rejected", line, s)
		}
	}
}

func FuzzParsePromLine(f *testing.F) {
	for line := range strings.Lines(promFixture) {
		f.Add(strings.TrimSpace(line))
	}
	f.Fuzz(func(t *testing.T, line string) {
		s, ok := parsePromLine(line)
		if ok && (s.name == "" || strings.ContainsAny(s.name, "{ \t")) {
			t.Errorf("parsePromLine(%q) gave name %q", line, s.name)
		}
	})
}

func TestCountsDeltaAndFormat(t *testing.T) {
	d := countsDelta(map[string]float64{"root": 10, "no_mapping": 2}, map[string]float64{"root": 25, "no_mapping": 2, "read_fault": 4})
	if want := map[string]float64{"root": 15, "read_fault": 4}; !maps.Equal(d, want) {
		t.Errorf("countsDelta = %v, want %v", d, want)
	}
	if got, want := fmtCounts(d), "root 15, read_fault 4"; got != want {
		t.Errorf("fmtCounts = %q, want %q", got, want)
	}
	if got := fmtCounts(map[string]float64{"b": 1, "a": 1, "": 1}); got != "(none) 1, a 1, b 1" {
		t.Errorf("fmtCounts ties = %q", got)
	}
	if got := fmtCounts(nil); got != "-" {
		t.Errorf("fmtCounts(nil) = %q, want -", got)
	}
}

func TestParseFdinfoMap(t *testing.T) {
	data := "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t1\nkey_size:\t4\n" +
		"value_size:\t8\nmax_entries:\t1024\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t16384\nmap_id:\t42\nfrozen:\t0\n"
	id, mem, ok := parseFdinfoMap([]byte(data))
	if !ok || id != 42 || mem != 16384 {
		t.Errorf("parseFdinfoMap = %d, %d, %v; want 42, 16384, true", id, mem, ok)
	}
	if _, _, ok := parseFdinfoMap([]byte("pos:\t0\nmemlock:\t4096\n")); ok {
		t.Error("fdinfo without map_id accepted")
	}
}

func TestBPFMapMemoryOfSelf(t *testing.T) {
	// The test process holds no BPF map: 0 bytes, no error.
	b, n, err := bpfMapMemory(os.Getpid())
	if err != nil || b != 0 || n != 0 {
		t.Errorf("bpfMapMemory(self) = %d, %d, %v", b, n, err)
	}
}

func TestParseHostCPU(t *testing.T) {
	data := "cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 3 0\nintr 1 2 3\n"
	got, err := parseHostCPU([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if want := (hostCPU{busy: 161, total: 1181}); got != want {
		t.Errorf("parseHostCPU = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseHostCPU([]byte(bad)); err == nil {
			t.Errorf("parseHostCPU(%q) accepted", bad)
		}
	}
	// 150 ticks busy over 1.5 s: 1.5 s of CPU, 100% of a core.
	if p := hostPercent(hostCPU{busy: 100}, hostCPU{busy: 250}, 1500*time.Millisecond); p != 100 {
		t.Errorf("hostPercent = %v, want 100", p)
	}
	if p := hostPercent(hostCPU{busy: 250}, hostCPU{busy: 100}, time.Second); p != 0 {
		t.Errorf("hostPercent going back = %v, want 0", p)
	}
}

func TestParseStatusKBRSS(t *testing.T) {
	got, err := parseStatusKB([]byte("VmHWM:\t 10 kB\nVmRSS:\t    9 kB\n"), "VmRSS")
	if err != nil || got != 9*1024 {
		t.Errorf("VmRSS = %d, %v; want %d", got, err, 9*1024)
	}
}

func TestLatestPatch(t *testing.T) {
	paths := []string{
		"/root/.pyenv/versions/3.12.9/bin/python3",
		"/root/.pyenv/versions/3.12.10/bin/python3",
		"/root/.pyenv/versions/3.12.dev/bin/python3",
		"/root/.pyenv/versions/3.12.1/bin/python3",
	}
	if got, want := latestPatch(paths), paths[1]; got != want {
		t.Errorf("latestPatch = %q, want %q", got, want)
	}
	if got := latestPatch(nil); got != "" {
		t.Errorf("latestPatch(nil) = %q", got)
	}
}

func TestCollectorYAMLBusy(t *testing.T) {
	p := profileConfig{cpuHz: 99, offCPU: true, minBlock: time.Millisecond, reportInterval: 10 * time.Second, metricsPort: 18888}
	path := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(path, []byte(collectorYAML(p, "/tmp/p")), 0o644); err != nil {
		t.Fatal(err)
	}
	cm, err := confmaptest.LoadConf(path)
	if err != nil {
		t.Fatalf("generated YAML does not parse: %v\n%s", err, collectorYAML(p, "/tmp/p"))
	}
	if got := cm.Get("receivers::bpfprofiler::report_interval"); got != "10s" {
		t.Errorf("report_interval = %v, want 10s", got)
	}
	if got := cm.Get("service::telemetry::metrics::level"); got != "normal" {
		t.Errorf("metrics level = %v, want normal", got)
	}
	readers, ok := cm.Get("service::telemetry::metrics::readers").([]any)
	if !ok || len(readers) != 1 {
		t.Fatalf("metrics readers = %#v", cm.Get("service::telemetry::metrics::readers"))
	}
	prom := readers[0].(map[string]any)["pull"].(map[string]any)["exporter"].(map[string]any)["prometheus"].(map[string]any)
	if prom["host"] != "127.0.0.1" || prom["port"] != 18888 {
		t.Errorf("prometheus reader = %v", prom)
	}
}

func TestSleepersKilledAndReaped(t *testing.T) {
	s, err := startSleepers(5)
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]int, len(s.cmds))
	for i, c := range s.cmds {
		pids[i] = c.Process.Pid
		if pgid, _ := syscall.Getpgid(pids[i]); pgid != s.pgid {
			t.Errorf("sleeper %d in group %d, want %d", pids[i], pgid, s.pgid)
		}
	}
	s.kill()
	s.kill() // twice is fine
	for _, pid := range pids {
		// Reaped: not even a zombie is left.
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sleeper %d still in /proc after kill (%v)", pid, err)
		}
	}
}

func TestPacerCounts(t *testing.T) {
	p := startPacer(100, "/bin/true")
	time.Sleep(300 * time.Millisecond)
	p.stop()
	p.stop()
	if n := p.count(); n < 5 || n > 40 {
		t.Errorf("pacer ran %d execs in 300 ms at 100/s", n)
	}
	var none *execPacer
	none.stop()
	if none.count() != 0 {
		t.Error("nil pacer counts")
	}
}

func TestWaitWindow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitWindow(ctx, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	exited := make(chan struct{})
	close(exited)
	if err := waitWindow(context.Background(), time.Hour, exited); err == nil {
		t.Error("exited: no error")
	}
	if err := waitWindow(context.Background(), time.Millisecond, nil); err != nil {
		t.Errorf("elapsed: %v", err)
	}
}

func TestPrintBusyTable(t *testing.T) {
	rows := []busyRow{
		{name: "1 idle host", hostBase: 2.5, col: &busyFigures{cpuTicks: 0.4, cpuSched: 0.38, peakRSS: 40 << 20, endRSS: 38 << 20,
			mapBytes: 12 << 20, maps: 30, host: 3.1, metrics: true,
			failed: map[string]float64{"open_failed": 1}, walks: map[string]float64{"root": 90}, tables: 12, tableBytes: 1 << 20}},
		{name: "3 + 100 execs/s", hostBase: 20, execBase: 99.5, col: &busyFigures{execRate: 98, cpuSched: -1}},
	}
	var b bytes.Buffer
	printBusyTable(&b, rows, &busyStartup{cpuTicks: 40, peakRSS: 50 << 20, ready: 3 * time.Second}, []string{"temurin 25: not found"})
	out := b.String()
	for _, want := range []string{
		"| 1 idle host | 0.40 | 40.0 | 12.0 | open_failed 1 | root 90 | 2.5% of a core |",
		"| 3 + 100 execs/s | 0.00 | 0.0 | 0.0 | n/a | n/a | 20.0% of a core |",
		"| start-up: first 10s, runtimes running | 40.00 | 50.0 |",
		"| 1 idle host | 0.38 | 38.0 | 12 | 1.00 | 30 | 3.1% of a core |  |",
		"| 3 + 100 execs/s | n/a | 0.0 | n/a | n/a | 0 | 0.0% of a core | 99.5 / 98.0 |",
		"note: temurin 25: not found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestParseBusyPhases(t *testing.T) {
	tests := []struct {
		flag    string
		want    []int
		wantErr bool
	}{
		{flag: "1,2,3,4", want: []int{1, 2, 3, 4}},
		{flag: "3", want: []int{3}},
		{flag: " 1, 3 ", want: []int{1, 3}},
		{flag: "0", wantErr: true},
		{flag: "5", wantErr: true},
		{flag: "", wantErr: true},
		{flag: "1,x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseBusyPhases(tt.flag)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseBusyPhases(%q) error %v, want error %v", tt.flag, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		var phases []int
		for n := 1; n <= 4; n++ {
			if got[n] {
				phases = append(phases, n)
			}
		}
		if !slices.Equal(phases, tt.want) || len(got) != len(tt.want) {
			t.Errorf("parseBusyPhases(%q) = %v, want %v", tt.flag, got, tt.want)
		}
	}
}
