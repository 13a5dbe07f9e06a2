// Package sampler loads the on-CPU sampling BPF program (bpf/cpu.bpf.c),
// attaches it to one cpu-clock perf event per online CPU and drains the
// aggregated stacks into plain Go values.
//
// Kernel-facing code lives in sampler_linux.go; this file holds the options,
// the result types and the pure conversions, which are tested without root.
package sampler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// MaxTargets is the capacity of the BPF pid filter (target_pids in cpu.bpf.c).
const MaxTargets = stackdrain.MaxTargets

// Mechanism names how the sampler records samples: one cpu-clock perf event
// per CPU.
const Mechanism = "perf_event"

// Options configure a Sampler.
type Options struct {
	// SamplesPerSecond is the sampling frequency per CPU (cpu-clock software
	// event in frequency mode). It must not exceed
	// kernel.perf_event_max_sample_rate.
	SamplesPerSecond uint64
	// TargetPIDs are tgids (in PIDNamespace) to sample; empty samples every
	// process.
	TargetPIDs []uint32
	// PIDNamespace, when set, is the collector's own (child) pid namespace:
	// samples then carry pids as seen from it, and processes outside it are
	// not sampled. Zero: host pids.
	PIDNamespace procfs.PIDNamespace
	// ReportInterval is how often Drain will be called; with
	// SamplesPerSecond and the number of CPUs it sizes the maps (see
	// mapSizes). 0: 10s.
	ReportInterval time.Duration
	// Maps overrides the derived map sizes, field by field (0: derived);
	// tests use small maps to make them fill up.
	Maps MapSizes
	// Unwind, when set, walks user stacks with its unwind tables where
	// they are loaded (the sampler loads those of the processes it
	// announces), and with frame pointers elsewhere; nil: frame pointers
	// only.
	Unwind *unwinder.Tables
	// OpenScopes, when set, is the probes' maps of open scopes
	// (internal/scopemap): samples of a thread inside one carry it.
	OpenScopes *scopemap.Maps
}

func (o Options) validate() error {
	if o.SamplesPerSecond == 0 {
		return errors.New("SamplesPerSecond must be at least 1")
	}
	if len(o.TargetPIDs) > MaxTargets {
		return fmt.Errorf("targets: %d pids exceed the BPF filter capacity %d", len(o.TargetPIDs), MaxTargets)
	}
	if o.ReportInterval < 0 {
		return fmt.Errorf("report_interval: must not be negative, got %v", o.ReportInterval)
	}
	return nil
}

// mapSizes returns the map sizes for cpus CPUs: derived, then overridden.
func (o Options) mapSizes(cpus int) MapSizes {
	window := o.ReportInterval
	if window == 0 {
		window = defaultWindow
	}
	sz := mapSizes(o.SamplesPerSecond, cpus, window)
	if o.Maps.Counts != 0 {
		sz.Counts = o.Maps.Counts
	}
	if o.Maps.Stacks != 0 {
		sz.Stacks = o.Maps.Stacks
	}
	return sz
}

// ErrRateAboveLimit is the error of a sampling frequency above the
// kernel's kernel.perf_event_max_sample_rate (which the kernel may lower at
// run time).
var ErrRateAboveLimit = errors.New("sampling frequency above the kernel's limit")

// checkSampleRate fails when the requested per-CPU frequency is above the
// kernel limit; the error names both numbers.
func checkSampleRate(requested, limit uint64) error {
	if requested > limit {
		return fmt.Errorf("%w: %d exceeds kernel.perf_event_max_sample_rate %d", ErrRateAboveLimit, requested, limit)
	}
	return nil
}

// parseSampleRate parses /proc/sys/kernel/perf_event_max_sample_rate.
func parseSampleRate(b []byte) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse kernel.perf_event_max_sample_rate: %w", err)
	}
	return v, nil
}

// parseCPUList parses a kernel cpu list such as "0-3,5,7-8" (the format of
// /sys/devices/system/cpu/online) into sorted, distinct CPU numbers.
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty cpu list")
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, lo)
		}
		last := first
		if isRange {
			last, err = strconv.Atoi(hi)
			if err != nil || last < first {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}
