package sampler

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-1\n", want: []int{0, 1}},
		{in: "0-3,5,7-8", want: []int{0, 1, 2, 3, 5, 7, 8}},
		{in: "4,0-1,1", want: []int{0, 1, 4}},
		{in: "", wantErr: true},
		{in: "a", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "0,,1", wantErr: true},
		{in: "-1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseCPUList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCPUList(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSampleRate(t *testing.T) {
	if err := checkSampleRate(99, 100000); err != nil {
		t.Fatalf("99 Hz rejected: %v", err)
	}
	if err := checkSampleRate(100000, 100000); err != nil {
		t.Fatalf("limit itself rejected: %v", err)
	}
	err := checkSampleRate(200000, 100000)
	if err == nil {
		t.Fatal("200000 > 100000 accepted")
	}
	if !errors.Is(err, ErrRateAboveLimit) {
		t.Errorf("error %v is not ErrRateAboveLimit", err)
	}
	for _, s := range []string{"200000", "100000", "kernel.perf_event_max_sample_rate"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	for in, want := range map[string]uint64{"100000\n": 100000, " 25000 ": 25000} {
		if got, err := parseSampleRate([]byte(in)); err != nil || got != want {
			t.Errorf("parseSampleRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseSampleRate([]byte("x")); err == nil {
		t.Error("parseSampleRate(x) succeeded")
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "ok", opts: Options{SamplesPerSecond: 19}},
		{name: "zero rate", opts: Options{}, wantErr: "SamplesPerSecond"},
		{name: "too many targets", opts: Options{SamplesPerSecond: 19, TargetPIDs: make([]uint32, MaxTargets+1)}, wantErr: "capacity"},
	}
	for _, tt := range tests {
		err := tt.opts.validate()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestMapSizes(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		cpus   int
		counts uint32
		stacks uint32
	}{
		// 19 Hz x 2 CPUs x 10 s = 380 samples: the floors.
		{name: "default", opts: Options{SamplesPerSecond: 19, ReportInterval: 10 * time.Second}, cpus: 2, counts: 4096, stacks: 1024},
		{name: "interval 0 means 10s", opts: Options{SamplesPerSecond: 19}, cpus: 2, counts: 4096, stacks: 1024},
		// 99 Hz x 8 CPUs x 10 s x 1.25 = 9900 -> 10240.
		{name: "99 Hz on 8 CPUs", opts: Options{SamplesPerSecond: 99, ReportInterval: 10 * time.Second}, cpus: 8, counts: 10240, stacks: 10240},
		// 4000 Hz x 2 CPUs x 10 s x 1.25 = 100000: the caps.
		{name: "4000 Hz", opts: Options{SamplesPerSecond: 4000, ReportInterval: 10 * time.Second}, cpus: 2, counts: 65536, stacks: 32768},
		{name: "4000 Hz, 1s", opts: Options{SamplesPerSecond: 4000, ReportInterval: time.Second}, cpus: 2, counts: 10240, stacks: 10240},
		{name: "override", opts: Options{SamplesPerSecond: 4000, Maps: MapSizes{Stacks: 64}}, cpus: 2, counts: 65536, stacks: 64},
	}
	for _, tt := range tests {
		got := tt.opts.mapSizes(tt.cpus)
		if got.Counts != tt.counts || got.Stacks != tt.stacks {
			t.Errorf("%s: %+v, want counts %d stacks %d", tt.name, got, tt.counts, tt.stacks)
		}
	}
}
