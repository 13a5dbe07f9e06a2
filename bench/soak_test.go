package main

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestLeastSquares(t *testing.T) {
	for _, c := range []struct {
		name      string
		xs, ys    []float64
		slope, se float64 // se NaN: none
		ok        bool
		tolerance float64
	}{
		{"flat", []float64{0, 1, 2, 3}, []float64{5, 5, 5, 5}, 0, 0, true, 1e-12},
		{"exact line", []float64{0, 10, 20, 30}, []float64{1, 3, 5, 7}, 0.2, 0, true, 1e-12},
		{"noisy flat", []float64{0, 1, 2, 3}, []float64{1, -1, 1, -1}, -0.4, math.Sqrt(3.2 / 2 / 5), true, 1e-9},
		{"two points: no error", []float64{0, 2}, []float64{0, 4}, 2, math.NaN(), true, 1e-12},
		{"one point", []float64{1}, []float64{1}, 0, math.NaN(), false, 0},
		{"same x", []float64{3, 3, 3}, []float64{1, 2, 3}, 0, math.NaN(), false, 0},
		{"mismatched", []float64{1, 2}, []float64{1}, 0, math.NaN(), false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			slope, se, ok := leastSquares(c.xs, c.ys)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if math.Abs(slope-c.slope) > c.tolerance {
				t.Errorf("slope = %v, want %v", slope, c.slope)
			}
			if math.IsNaN(c.se) != math.IsNaN(se) || !math.IsNaN(se) && math.Abs(se-c.se) > c.tolerance {
				t.Errorf("stderr = %v, want %v", se, c.se)
			}
		})
	}
}

// samplesGrowing are samples every 10 s for d, RSS growing by perHour
// bytes an hour from 100 MiB, BPF memory flat at 60 MiB.
func samplesGrowing(d time.Duration, perHour float64) []soakSample {
	var out []soakSample
	for at := time.Duration(0); at <= d; at += 10 * time.Second {
		out = append(out, soakSample{
			at:        at,
			rss:       uint64(100<<20 + perHour*at.Hours()),
			bpf:       bpfMemory{mapBytes: 60 << 20},
			execs:     int64(at.Seconds() * 100),
			metricsOK: true, unwindTables: 120, unwindTableBytes: 20 << 20,
		})
	}
	return out
}

func TestSoakGrowth(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []soakSample
		from    time.Duration
		want    float64 // MiB/h
	}{
		{"flat", samplesGrowing(time.Hour, 0), 10 * time.Minute, 0},
		{"2 MiB/h", samplesGrowing(time.Hour, 2<<20), 10 * time.Minute, 2},
		{"warm-up left out", append([]soakSample{{at: 0, rss: 10 << 20}}, samplesGrowing(time.Hour, 0)[1:]...), time.Minute, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := soakGrowth(c.samples, c.from, func(s soakSample) float64 { return float64(s.rss) })
			if !g.ok || math.Abs(g.mibPerHour-c.want) > 1e-6 {
				t.Errorf("growth = %+v, want %v MiB/h", g, c.want)
			}
		})
	}
}

func TestJudgeSoak(t *testing.T) {
	good := soakOutcome{duration: time.Hour, execTarget: 100, memoryLimit: 512 << 20, cgroupPeak: 300 << 20,
		alive: true, buildIDs: 3050, builds: 3050, generations: 61}
	short := good
	short.duration, short.buildIDs, short.builds, short.generations = 3*time.Minute, 200, 200, 4
	mod := func(samples []soakSample, f func(*soakSample)) []soakSample {
		out := append([]soakSample(nil), samples...)
		for i := range out {
			f(&out[i])
		}
		return out
	}
	outcome := func(o soakOutcome, f func(*soakOutcome)) soakOutcome { f(&o); return o }
	for _, c := range []struct {
		name    string
		samples []soakSample
		outcome soakOutcome
		pass    bool
		failing string // the checks that fail, when !pass, comma-separated
	}{
		{"an hour, flat", samplesGrowing(time.Hour, 0), good, true, ""},
		{"an hour, RSS growing 2 MiB/h", samplesGrowing(time.Hour, 2<<20), good, false, "RSS growth from minute 10"},
		{"short, RSS growing: reported only", samplesGrowing(3*time.Minute, 50<<20), short, true, ""},
		{"OOM kill", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.oomKills = 1 }), short, false, "no OOM kill in the cgroup"},
		{"collector died", samplesGrowing(3*time.Minute, 0), outcome(short, func(o *soakOutcome) { o.alive, o.exitNote = false, "exited" }), false, "collector"},
		{"exec rate short", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.execs = int64(s.at.Seconds() * 85) }), short, false, "exec rate"},
		{"exec rate within 10%", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.execs = int64(s.at.Seconds() * 91) }), short, true, ""},
		{"tables over their bound", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.unwindTables = soakMaxUnwindTables + 1 }), short, false, "unwind tables (peak)"},
		{"table bytes over their bound", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.unwindTableBytes = soakMaxUnwindTableByte + 1 }), short, false, "unwind table bytes (peak)"},
		{"a scrape missed", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.metricsOK = s.at != time.Minute }), short, false, "collector metrics scraped"},
		{"metrics never scraped: bounds unknown", mod(samplesGrowing(3*time.Minute, 0), func(s *soakSample) { s.metricsOK = false }), short, false,
			"collector metrics scraped, unwind tables (peak), unwind table bytes (peak)"},
		{"a build id repeated", samplesGrowing(3*time.Minute, 0), outcome(short, func(o *soakOutcome) { o.buildIDs-- }), false, "binaries rebuilt with new build ids"},
		{"never rebuilt", samplesGrowing(3*time.Minute, 0), outcome(short, func(o *soakOutcome) { o.buildIDs, o.builds, o.generations = 50, 50, 1 }), false, "binaries rebuilt with new build ids"},
		{"no samples", nil, short, false, "samples"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checks := judgeSoak(c.samples, c.outcome)
			if got := soakPassed(checks); got != c.pass {
				t.Fatalf("passed = %v, want %v: %+v", got, c.pass, checks)
			}
			var failed []string
			for _, ch := range checks {
				if ch.judged && !ch.ok {
					failed = append(failed, ch.name)
				}
			}
			if got := strings.Join(failed, ", "); got != c.failing {
				t.Errorf("failed checks %q, want %q", got, c.failing)
			}
		})
	}
}

func TestSoakCSV(t *testing.T) {
	var buf bytes.Buffer
	table, err := newSoakCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	s := soakSample{at: 90 * time.Second, rss: 100 << 20, goHeap: 30 << 20, cgroup: 200 << 20, cgroupCache: 50 << 20, cgroupPeak: 300 << 20,
		bpf: bpfMemory{maps: 70, mapBytes: 60 << 20, inner: 12, innerByte: 4 << 20}, cpu: 1.234, execs: 9000, execRate: 99.96,
		unwindTables: 12, unwindTableBytes: 3 << 20, pythonProcs: 5, jvmProcs: 2, v8Procs: 1, buildIDs: 100}
	for _, s := range []soakSample{s, {at: 100 * time.Second, unwindTables: -1, unwindTableBytes: -1, pythonProcs: -1, jvmProcs: -1, v8Procs: -1, oomKills: 1}} {
		if err := table.write(s); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		soakCSVHeader,
		{"90.0", "104857600", "31457280", "209715200", "52428800", "314572800", "67108864", "62914560", "4194304", "70", "12", "1.23", "9000", "100.0",
			"12", "3145728", "5", "2", "1", "0", "100"},
		{"100.0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0.00", "0", "0.0", "-1", "-1", "-1", "-1", "-1", "1", "0"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), buf.String())
	}
	for i := range want {
		if strings.Join(rows[i], ",") != strings.Join(want[i], ",") {
			t.Errorf("row %d:\n got %q\nwant %q", i, rows[i], want[i])
		}
	}
}

func TestSoakCollectorYAML(t *testing.T) {
	shipped := `receivers:
  bpfprofiler:
    report_interval: 10s
    kubernetes:
      host_root: /host
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull: {exporter: {prometheus: {host: 0.0.0.0, port: 8888}}}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [otlp_grpc]}
`
	out, err := soakCollectorYAML(shipped, 12345)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Receivers struct {
			Bpfprofiler struct {
				ReportInterval string `yaml:"report_interval"`
				OffCPU         struct {
					Enabled  bool   `yaml:"enabled"`
					MinBlock string `yaml:"min_block"`
				} `yaml:"off_cpu"`
				Kubernetes struct {
					HostRoot string `yaml:"host_root"`
				} `yaml:"kubernetes"`
			} `yaml:"bpfprofiler"`
		} `yaml:"receivers"`
		Service struct {
			Telemetry struct {
				Metrics struct {
					Level   string `yaml:"level"`
					Readers []struct {
						Pull struct {
							Exporter struct {
								Prometheus struct {
									Host string `yaml:"host"`
									Port int    `yaml:"port"`
								} `yaml:"prometheus"`
							} `yaml:"exporter"`
						} `yaml:"pull"`
					} `yaml:"readers"`
				} `yaml:"metrics"`
			} `yaml:"telemetry"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	r := cfg.Receivers.Bpfprofiler
	m := cfg.Service.Telemetry.Metrics
	if r.ReportInterval != "10s" || !r.OffCPU.Enabled || r.OffCPU.MinBlock != "1ms" || r.Kubernetes.HostRoot != "/" ||
		m.Level != "normal" || len(m.Readers) != 1 || m.Readers[0].Pull.Exporter.Prometheus.Host != "127.0.0.1" ||
		m.Readers[0].Pull.Exporter.Prometheus.Port != 12345 {
		t.Errorf("soak configuration:\n%s", out)
	}
	if _, err := soakCollectorYAML("receivers: {}\n", 1); err == nil {
		t.Error("no error for a configuration without the receiver")
	}
}

// The DaemonSet's configuration the soak starts from parses.
func TestSoakShippedConfiguration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	if _, err := soakCollectorYAML(cm.Data["collector.yaml"], 1); err != nil {
		t.Fatal(err)
	}
}

func TestParseBuildIDNote(t *testing.T) {
	note := func(typ uint32, name string, desc []byte) []byte {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.LittleEndian, []uint32{uint32(len(name)), uint32(len(desc)), typ})
		b.WriteString(name)
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
		b.Write(desc)
		return b.Bytes()
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
		ok   bool
	}{
		{"sha1", note(3, "GNU\x00", []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), "deadbeef0102030405060708090a0b0c0d0e0f10", true},
		{"other type", note(1, "GNU\x00", []byte{1, 2}), "", false},
		{"short", []byte{4, 0, 0, 0}, "", false},
		{"desc past the end", note(3, "GNU\x00", []byte{1, 2})[:17], "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseBuildIDNote(c.data, binary.LittleEndian)
			if (err == nil) != c.ok || got != c.want {
				t.Errorf("parseBuildIDNote = %q, %v; want %q (ok %v)", got, err, c.want, c.ok)
			}
		})
	}
}

func TestFdinfoField(t *testing.T) {
	data := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t12\nkey_size:\t4\nvalue_size:\t4\nmax_entries:\t16384\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t131328\nmap_id:\t42\n")
	for _, c := range []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"map_type", 12, true}, {"memlock", 131328, true}, {"map_flags", 0, false}, {"absent", 0, false},
	} {
		if got, ok := fdinfoField(data, c.key); got != c.want || ok != c.ok {
			t.Errorf("fdinfoField(%q) = %d, %v; want %d, %v", c.key, got, ok, c.want, c.ok)
		}
	}
}

func TestDrawSoakPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "soak.png")
	samples := samplesGrowing(time.Hour, 0)
	for i := range samples {
		samples[i].cpu = 2
		samples[i].cgroup = samples[i].rss + samples[i].bpf.total()
	}
	if err := drawSoakPNG(path, "test", samples); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width < 600 || cfg.Height < 500 {
		t.Errorf("a %dx%d image", cfg.Width, cfg.Height)
	}
}

func TestMinuteTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 3, "0 0.5 1 1.5 2 2.5 3"},
		{0, 60, "0 5 10 15 20 25 30 35 40 45 50 55 60"},
		{0.2, 11, "1 2 3 4 5 6 7 8 9 10 11"},
		{0, 240, "0 15 30 45 60 75 90 105 120 135 150 165 180 195 210 225 240"},
	} {
		var got []string
		for _, tk := range (minuteTicks{}).Ticks(c.lo, c.hi) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("ticks of %v..%v: %q, want %q", c.lo, c.hi, strings.Join(got, " "), c.want)
		}
	}
}
