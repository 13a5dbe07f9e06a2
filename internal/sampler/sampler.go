// Package sampler loads the on-CPU sampling BPF program (bpf/cpu.bpf.c),
// attaches it to one cpu-clock perf event per online CPU and drains the
// aggregated stacks into plain Go values.
//
// Kernel-facing code lives in sampler_linux.go; this file holds the options,
// the result types and the pure conversions, which are tested without root.
package sampler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxTargets is the capacity of the BPF pid filter (target_pids in cpu.bpf.c).
const MaxTargets = 4096

// Options configure a Sampler.
type Options struct {
	// SamplesPerSecond is the sampling frequency per CPU (cpu-clock software
	// event in frequency mode). It must not exceed
	// kernel.perf_event_max_sample_rate.
	SamplesPerSecond uint64
	// TargetPIDs are host tgids to sample; empty samples every process.
	TargetPIDs []uint32
}

// RawSample is one aggregated stack of one thread, as captured.
type RawSample struct {
	PID, TID    uint32
	Comm        string   // thread name recorded by BPF; "" when unknown
	UserStack   []uint64 // leaf first; return addresses for non-leaf frames
	KernelStack []uint64 // leaf first
	Count       uint64
}

// Stats count what happened to the samples of one Drain window; they describe
// exactly the samples that Drain returned (the counters are double-buffered
// like the samples).
type Stats struct {
	Recorded          uint64 // samples counted
	LostMapFull       uint64 // samples dropped because the counts map was full
	UserStackErrors   uint64 // bpf_get_stackid failures for user stacks
	KernelStackErrors uint64 // bpf_get_stackid failures for kernel stacks
	StackMissing      uint64 // samples whose stack id was absent from the stack map at drain
}

// stackKey mirrors struct stack_key of bpf/common.h.
type stackKey struct {
	PID, TID                   uint32
	UserStackID, KernelStackID int32
}

func (o Options) validate() error {
	if o.SamplesPerSecond == 0 {
		return errors.New("cpu::samples_per_second: must be at least 1")
	}
	if len(o.TargetPIDs) > MaxTargets {
		return fmt.Errorf("targets: %d pids exceed the BPF filter capacity %d", len(o.TargetPIDs), MaxTargets)
	}
	return nil
}

// checkSampleRate fails when the requested per-CPU frequency is above the
// kernel limit; the error names both numbers.
func checkSampleRate(requested, limit uint64) error {
	if requested > limit {
		return fmt.Errorf("cpu::samples_per_second %d exceeds kernel.perf_event_max_sample_rate %d", requested, limit)
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

// trimStack copies the frames of a stack-trace map value up to the first
// zero entry (bpf_get_stackid zero-fills unused slots).
func trimStack(frames []uint64) []uint64 {
	n := slices.Index(frames, 0)
	if n < 0 {
		n = len(frames)
	}
	if n == 0 {
		return nil
	}
	return slices.Clone(frames[:n])
}

// commString converts a NUL-padded kernel comm to a string.
func commString[T ~int8 | ~uint8](comm []T) string {
	b := make([]byte, 0, len(comm))
	for _, c := range comm {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// assembleSamples joins drained counts with their stacks (already trimmed,
// keyed by stack id) and thread names. Negative stack ids mean "no stack"
// (the error, if any, was counted in BPF); a non-negative id absent from
// stacks yields an empty stack and is counted in the returned missing total.
// The result is sorted by pid, tid, then descending count.
func assembleSamples(counts map[stackKey]uint64, stacks map[int32][]uint64, comms map[uint32]string) (samples []RawSample, missing uint64) {
	samples = make([]RawSample, 0, len(counts))
	for k, n := range counts {
		if n == 0 {
			continue
		}
		s := RawSample{PID: k.PID, TID: k.TID, Comm: comms[k.TID], Count: n}
		var ok bool
		if s.UserStack, ok = stackFor(stacks, k.UserStackID); !ok {
			missing += n
		}
		if s.KernelStack, ok = stackFor(stacks, k.KernelStackID); !ok {
			missing += n
		}
		samples = append(samples, s)
	}
	slices.SortFunc(samples, func(a, b RawSample) int {
		return cmp.Or(
			cmp.Compare(a.PID, b.PID),
			cmp.Compare(a.TID, b.TID),
			cmp.Compare(b.Count, a.Count),
			slices.Compare(a.UserStack, b.UserStack),
			slices.Compare(a.KernelStack, b.KernelStack),
		)
	})
	return samples, missing
}

// stackFor returns the stack with the given id; ok is false only when a
// valid id has no stored stack.
func stackFor(stacks map[int32][]uint64, id int32) (frames []uint64, ok bool) {
	if id < 0 {
		return nil, true
	}
	frames, ok = stacks[id]
	return frames, ok
}

// inflightSeq mirrors struct inflight_seq: per-CPU program entry/exit counts.
type inflightSeq struct {
	Enter, Exit uint64
}

// quiescent reports whether every CPU finished the program invocation that
// was running (if any) when before was read: either nothing was running then
// (enter == exit) or exit has since caught up with that enter.
func quiescent(before, now []inflightSeq) bool {
	for i, b := range before {
		if b.Enter == b.Exit {
			continue
		}
		if i >= len(now) || now[i].Exit < b.Enter {
			return false
		}
	}
	return true
}
