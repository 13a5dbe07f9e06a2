package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{3}, 3},
		{"odd unsorted", []float64{5, 1, 3}, 3},
		{"even is mean of middle two", []float64{4, 1, 3, 2}, 2.5},
		{"duplicates", []float64{2, 2, 9, 2}, 2},
		{"negative", []float64{-1, -3, -2}, -2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			if got := median(in); got != tt.want {
				t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatalf("median modified its input: %v", in)
				}
			}
		})
	}
}

// statTail is a /proc/<pid>/stat line after the comm; %s stands for utime
// and stime (fields 14 and 15), the other fields are plausible numbers.
const statTail = " S 1 1234 1234 0 -1 4194560 2512 0 0 0 %s 0 0 20 0 12 0 987 1385328640 10312 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"

func TestParseStatTimes(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		utime, stime uint64
		wantErr      bool
	}{
		{"plain", "1234 (otelcol-bpfpro)" + fill("123 45"), 123, 45, false},
		{"comm with spaces", "42 (my prog name)" + fill("7 8"), 7, 8, false},
		{"comm with parens and spaces", "42 (a) b (c) d)" + fill("1000 2000"), 1000, 2000, false},
		{"comm that looks like fields", "42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12)" + fill("5 6"), 5, 6, false},
		{"empty comm", "42 ()" + fill("0 0"), 0, 0, false},
		{"no closing paren", "42 (truncated S 1 2 3", 0, 0, true},
		{"too short", "42 (x) S 1 2 3\n", 0, 0, true},
		{"not a number", "42 (x)" + fill("abc 1"), 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, s, err := procfs.ParseStatTimes([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("procfs.ParseStatTimes(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err == nil && (u != tt.utime || s != tt.stime) {
				t.Errorf("procfs.ParseStatTimes(%q) = %d, %d, want %d, %d", tt.in, u, s, tt.utime, tt.stime)
			}
		})
	}
}

// fill returns the part of a stat line after the comm, with utime and stime
// given as "U S".
func fill(utimeStime string) string {
	return strings.Replace(statTail, "%s", utimeStime, 1)
}

func TestParseStatTimesSelf(t *testing.T) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	if _, _, err := procfs.ParseStatTimes(data); err != nil {
		t.Fatalf("procfs.ParseStatTimes(/proc/self/stat): %v", err)
	}
}

func TestParseVmHWM(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{"typical", "Name:\totelcol\nVmPeak:\t 1400000 kB\nVmHWM:\t   41236 kB\nVmRSS:\t   40000 kB\n", 41236 * 1024, false},
		{"first line", "VmHWM: 1 kB\n", 1024, false},
		{"no trailing newline", "Name:\tx\nVmHWM:\t  512 kB", 512 * 1024, false},
		{"after other Vm lines", "VmRSS:\t 9 kB\nVmHWM:\t 10 kB\n", 10 * 1024, false},
		{"missing (kernel thread)", "Name:\tkworker/0:1\nState:\tI (idle)\n", 0, true},
		{"wrong unit", "VmHWM:\t 10 MB\n", 0, true},
		{"not a number", "VmHWM:\t ten kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVmHWM([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseVmHWM error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseVmHWM = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"396369 120412 2\n", 396369, false},
		{"0 0 0", 0, false},
		{"", 0, true},
		{"x 1 2", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSchedstat([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSchedstat(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseWallNS(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"4012345678\n", 4012345678, false},
		{"some perf chatter\n4000000000\n\n", 4 * time.Second, false},
		{"", 0, true},
		{"4.0s\n", 0, true},
		{"0\n", 0, true},
		{"-5\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseWallNS(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseWallNS(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCPUPercent(t *testing.T) {
	before := cpuSample{ticks: 100, schedNS: 1_000_000_000}
	after := cpuSample{ticks: 102, schedNS: 1_016_000_000}
	ticks, sched := cpuPercent(before, after, 4*time.Second)
	if ticks != 0.5 || sched != 0.4 {
		t.Errorf("cpuPercent = %v, %v; want 0.5, 0.4", ticks, sched)
	}
	// A thread exited: schedstat went backwards, so it is not usable.
	if _, sched := cpuPercent(after, before, time.Second); sched != -1 {
		t.Errorf("cpuPercent with schedstat going backwards: sched = %v, want -1", sched)
	}
}

func TestParseCPUNS(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"fixedwork: 10 iterations x 2 threads, checksum 00ff\nfixedwork: cpu_ns 8000000000\n", 8 * time.Second, false},
		{"fixedwork: cpu_ns 12\n[ perf record: Woken up 1 times to write data ]\n", 12, false},
		{"[ perf record: Captured and wrote 0.037 MB perf.data ]\n", 0, true},
		{"fixedwork: cpu_ns lots\n", 0, true},
		{"pingpong: cpu_ns 8000000000\n", 0, true}, // another workload's line
	}
	for _, tt := range tests {
		got, err := parseCPUNS(tt.in, "fixedwork")
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseCPUNS(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseCPUNSOtherWorkload(t *testing.T) {
	in := "pingpong: 100000 round trips, spin 17000, checksum 00ff\npingpong: switches_per_s 49587\npingpong: cpu_ns 3936657000\n"
	if got, err := parseCPUNS(in, "pingpong"); err != nil || got != 3936657000 {
		t.Errorf("parseCPUNS(pingpong) = %v, %v; want 3.936657s", got, err)
	}
}

func TestParseSwitchRate(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"pingpong: cpu_ns 12\npingpong: switches_per_s 49587\n", 49587},
		{"[ perf record: Woken up 1 times ]\n  pingpong: switches_per_s 1e5\n", 100000},
		{"pingpong: switches_per_s fast\n", 0},
		{"pingpong: switches_per_s -3\n", 0},
		{"fixedwork: switches_per_s 10\n", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := parseSwitchRate(tt.in, "pingpong"); got != tt.want {
			t.Errorf("parseSwitchRate(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParsePID(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"nodefixed: pid 4242\nnodefixed: cpu_ns 12\n", 4242},
		{"[ perf record: Woken up 1 times ]\n  nodefixed: pid 7\n", 7},
		{"nodefixed: pid me\n", 0},
		{"pyfixed: pid 10\n", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := parsePID(tt.in, "nodefixed"); got != tt.want {
			t.Errorf("parsePID(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
