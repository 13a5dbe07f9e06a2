package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"
)

// TestCollectorYAML loads each generated configuration into the real
// receiver's config type, so a renamed or misspelled key fails here rather
// than in the middle of a bench.
func TestCollectorYAML(t *testing.T) {
	tests := []struct {
		name string
		p    profileConfig
		want bpfprofilerreceiver.Config
	}{
		{"cpu 99Hz", profileConfig{cpuHz: 99}, bpfprofilerreceiver.Config{
			CPU:    bpfprofilerreceiver.CPUConfig{Enabled: true, SamplesPerSecond: 99},
			OffCPU: bpfprofilerreceiver.OffCPUConfig{Enabled: false},
		}},
		{"off-CPU only", profileConfig{offCPU: true, minBlock: time.Millisecond}, bpfprofilerreceiver.Config{
			CPU:    bpfprofilerreceiver.CPUConfig{Enabled: false},
			OffCPU: bpfprofilerreceiver.OffCPUConfig{Enabled: true, MinBlock: time.Millisecond},
		}},
		{"off-CPU 250us", profileConfig{offCPU: true, minBlock: 250 * time.Microsecond}, bpfprofilerreceiver.Config{
			OffCPU: bpfprofilerreceiver.OffCPUConfig{Enabled: true, MinBlock: 250 * time.Microsecond},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			profiles := filepath.Join(dir, "profiles dir")
			path := filepath.Join(dir, "collector.yaml")
			if err := os.WriteFile(path, []byte(collectorYAML(tt.p, profiles)), 0o644); err != nil {
				t.Fatal(err)
			}
			cm, err := confmaptest.LoadConf(path)
			if err != nil {
				t.Fatalf("generated YAML does not parse: %v\n%s", err, collectorYAML(tt.p, profiles))
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
			if cfg.ReportInterval != 2*time.Second || cfg.Pprof.Directory != profiles {
				t.Errorf("report_interval %v, pprof directory %q; want 2s, %q", cfg.ReportInterval, cfg.Pprof.Directory, profiles)
			}
			if cfg.CPU.Enabled != tt.want.CPU.Enabled || (tt.want.CPU.Enabled && cfg.CPU.SamplesPerSecond != tt.want.CPU.SamplesPerSecond) {
				t.Errorf("cpu = %+v, want %+v", cfg.CPU, tt.want.CPU)
			}
			if cfg.OffCPU.Enabled != tt.want.OffCPU.Enabled || (tt.want.OffCPU.Enabled && cfg.OffCPU.MinBlock != tt.want.OffCPU.MinBlock) {
				t.Errorf("off_cpu = %+v, want %+v", cfg.OffCPU, tt.want.OffCPU)
			}
		})
	}
}

func TestRotated(t *testing.T) {
	in := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotated(in, r); !slices.Equal(got, want) {
			t.Errorf("rotated(%v, %d) = %v, want %v", in, r, got, want)
		}
	}
	if !slices.Equal(in, []string{"a", "b", "c"}) {
		t.Errorf("rotated modified its input: %v", in)
	}
	if got := rotated([]string(nil), 3); got != nil {
		t.Errorf("rotated(nil) = %v", got)
	}
}

func TestSelectSuites(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"all", []string{"cpu", "unwind", "python", "java", "node", "ruby", "php", "memory", "offcpu", "probes", "usdt", "readers", "context", "busy", "startup", "gateway"}, false},
		{"busy", []string{"busy"}, false},
		{"gateway", []string{"gateway"}, false},
		{"unwind", []string{"unwind"}, false},
		{"python", []string{"python"}, false},
		{"java", []string{"java"}, false},
		{"node", []string{"node"}, false},
		{"ruby", []string{"ruby"}, false},
		{"php", []string{"php"}, false},
		{"probes", []string{"probes"}, false},
		{"usdt", []string{"usdt"}, false},
		{"cpu", []string{"cpu"}, false},
		{"offcpu", []string{"offcpu"}, false},
		{"", nil, true},
		{"off-cpu", nil, true},
	}
	for _, tt := range tests {
		got, err := selectSuites(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("selectSuites(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMountedAt(t *testing.T) {
	mounts := []byte("proc /proc proc rw,nosuid 0 0\n" +
		"none /sys/kernel/debug debugfs rw,relatime 0 0\n" +
		"none /sys/kernel/debug/tracing tracefs rw,relatime 0 0\n")
	if mountedAt(mounts, "tracefs", "/sys/kernel/tracing") {
		t.Error("tracefs under debugfs taken for /sys/kernel/tracing")
	}
	if !mountedAt(mounts, "tracefs", "/sys/kernel/debug/tracing") {
		t.Error("tracefs on /sys/kernel/debug/tracing not found")
	}
	withTracefs := append(mounts, "nodev /sys/kernel/tracing tracefs rw,relatime 0 0\n"...)
	if !mountedAt(withTracefs, "tracefs", "/sys/kernel/tracing") {
		t.Error("tracefs on /sys/kernel/tracing not found")
	}
	if mountedAt([]byte("tmpfs /sys/kernel/tracing tmpfs rw 0 0\n"), "tracefs", "/sys/kernel/tracing") {
		t.Error("a tmpfs taken for tracefs")
	}
	if mountedAt(nil, "tracefs", "/sys/kernel/tracing") {
		t.Error("empty mount table has tracefs")
	}
}

func TestPerfFailureReason(t *testing.T) {
	exit := errors.New("exit status 129")
	tests := []struct {
		name, out, want string
	}{
		{"event syntax error",
			"event syntax error: 'sched:sched_switch'\n                     \\___ unknown tracepoint\n\nError:\tFile /sys/kernel/tracing//events/sched/sched_switch not found.\nHint:\tPerhaps this kernel misses some CONFIG_ setting to enable this feature?.\n",
			"event syntax error: 'sched:sched_switch'; \\___ unknown tracepoint"},
		{"status lines skipped",
			"[ perf record: Woken up 1 times to write data ]\n\nError:\nNo permission to enable sched:sched_switch event.\n",
			"Error:; No permission to enable sched:sched_switch event."},
		{"no output", "", "perf record failed: exit status 129"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := perfFailureReason(tt.out, exit); got != tt.want {
				t.Errorf("perfFailureReason = %q, want %q", got, tt.want)
			}
		})
	}
	long := strings.Repeat("x", 500)
	if got := perfFailureReason(long, exit); len(got) != 203 {
		t.Errorf("a long reason is not cut to 200 characters: %d", len(got))
	}
}

// TestOffCPUReport feeds the report two rounds and checks the summary lines
// the off-CPU suite promises.
func TestOffCPUReport(t *testing.T) {
	rep := newReport([]string{scBaseline, scOffCPU, scPerfSwitch}, scOffCPU, "pingpong_nap", offCPUChecks("1ms"))
	rep.notes = []string{"perf sched_switch: tracefs was not mounted"}
	res := func(wall, cpu float64, rate float64) runResult {
		return runResult{wall: time.Duration(wall * 1e9), cpu: time.Duration(cpu * 1e9), switchRate: rate}
	}
	for _, k := range []float64{1, 1.01} {
		round := map[string]runResult{
			scBaseline:   res(4*k, 4*k, 50000),
			scOffCPU:     res(4*k*1.02, 4*k*1.01, 49000),
			scPerfSwitch: res(4*k*1.2, 4*k*1.3, 41000),
		}
		cr := &collectorRun{cpuTicks: 1.5, cpuSched: 1.2, peakRSS: 40 << 20, sawWorkload: true}
		rep.add(round, cr)
	}
	if line := rep.roundLine(1, 2, []string{scOffCPU, scPerfSwitch, scBaseline}); !strings.Contains(line, "bpfprofiler off-CPU 4.121s (x1.020") {
		t.Errorf("round line: %s", line)
	}
	var b bytes.Buffer
	rep.print(&b)
	out := b.String()
	for _, want := range []string{
		"workload context switches: 50000/s",
		"perf sched_switch: tracefs was not mounted",
		"collector CPU: 1.20% of a core (median, schedstat; utime+stime median 1.50%), peak RSS 40.0 MiB",
		"off-CPU slowdown ≤ 3% at min_block 1ms: yes (wall ratio 1.020; by workload CPU: yes, CPU ratio 1.010)",
		"slowdown no worse than perf sched_switch's: yes (wall ratio: bpfprofiler 1.020, perf 1.200)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	b.Reset()
	offCPUChecks("5ms")(&b, rep)
	if !strings.Contains(b.String(), "at min_block 1ms (collector ran with min_block 5ms): yes") {
		t.Errorf("min_block mismatch not said: %s", b.String())
	}
}

// The ruby and php suites' report gives auto's wall time and collector CPU
// as ratios to frame_pointer's of the same round, and the chain's share.
func TestInterpretedReport(t *testing.T) {
	rep := newReport([]string{scBaseline, scFramePtr, scUnwindAuto}, scUnwindAuto, "fib", interpretedChecks(phpChain))
	for _, k := range []float64{1, 1.1} {
		run := func(wall float64) runResult {
			return runResult{wall: time.Duration(wall * k * 1e9), cpu: time.Duration(wall * k * 1e9)}
		}
		round := map[string]runResult{scBaseline: run(4), scFramePtr: run(4.04), scUnwindAuto: run(4.08)}
		fp := &collectorRun{cpuTicks: 0.2, cpuSched: 0.25, chain: chainCount{0, 400}}
		auto := &collectorRun{cpuTicks: 0.5, cpuSched: -1, chain: chainCount{396, 400}, peakRSS: 50 << 20}
		rep.addCollectorCPU(scFramePtr, fp)
		rep.addCollectorCPU(scUnwindAuto, auto)
		rep.addChain(scFramePtr, fp.chain)
		rep.addChain(scUnwindAuto, auto.chain)
		rep.add(round, auto)
	}
	var b bytes.Buffer
	rep.checks(&b, rep)
	for _, want := range []string{
		"bpfprofiler auto: samples of the workload with fib ← php_work ← {main}: 99.0% (792 of 800)",
		"bpfprofiler frame_pointer: samples of the workload with fib ← php_work ← {main}: 0.0% (0 of 800)",
		"slowdown with auto / frame_pointer's <= 1.01: yes (wall 1.010, 1.010..1.010; workload CPU 1.010)",
		"collector CPU with auto / frame_pointer's: 2.00 (2.00..2.00; medians 0.50% and 0.25% of a core)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
