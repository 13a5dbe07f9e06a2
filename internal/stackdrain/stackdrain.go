// Package stackdrain reads and clears the double-buffered stack aggregation
// that the BPF programs of bpf/ (cpu.bpf.c, offcpu.bpf.c) share: two sets of
// (counts, stacks) maps and per-generation stats, a config map selecting the
// generation the program writes, per-CPU in-flight counters, thread names and
// the target pid filter. The CPU sampler and the off-CPU tracer both drain
// through it.
//
// Kernel-facing code lives in stackdrain_linux.go; this file holds the result
// types and the pure conversions, which are tested without root.
package stackdrain

import (
	"cmp"
	"slices"
)

// MaxTargets is the capacity of the BPF pid filter (target_pids).
const MaxTargets = 4096

// Sample is one aggregated stack of one thread, as captured.
type Sample struct {
	PID, TID    uint32
	Comm        string   // thread name recorded by BPF; "" when unknown
	UserStack   []uint64 // leaf first; return addresses for non-leaf frames
	KernelStack []uint64 // leaf first
	Value       uint64   // sample count (CPU) or nanoseconds (off-CPU)
}

// Stats count what happened in one Drain window; they describe exactly the
// samples that Drain returned (the counters are double-buffered like them).
type Stats struct {
	Recorded          uint64 // records aggregated (samples, or waits)
	LostMapFull       uint64 // records dropped because the counts map was full
	UserStackErrors   uint64 // user stacks that could not be captured or stored
	KernelStackErrors uint64 // kernel stacks that could not be captured or stored
	StackMissing      uint64 // values whose stack id was absent from the stack map at drain
	// NewProcessDrops counts new-process notifications lost (CPU sampler
	// only; see sampler.Sampler.NewProcesses): the BPF ring buffer was full
	// (that process is announced again on a later sample) or the Go channel
	// was full (that notification is gone).
	NewProcessDrops uint64
}

// stackKey mirrors struct stack_key of bpf/common.h.
type stackKey struct {
	PID, TID                   uint32
	UserStackID, KernelStackID int32
}

// config mirrors struct sampler_config.
type config struct {
	Generation, FilterEnabled uint32
	PIDNamespaceDev           uint64
	PIDNamespaceIno           uint64
}

// counters mirrors struct sampler_stats.
type counters struct {
	Recorded, LostMapFull, UserStackErrors, KernelStackErrors, NewPidDrops uint64
}

// threadComm mirrors struct thread_comm.
type threadComm struct {
	Comm [16]byte
}

// inflightSeq mirrors struct inflight_seq: per-CPU program entry/exit counts.
type inflightSeq struct {
	Enter, Exit uint64
}

// trimStack copies the frames of a stack-trace map value up to the first
// zero entry (the programs store frames zero-padded).
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
// keyed by stack id) and thread names. Negative stack ids mean "no stack" (the error, if any, was
// counted in BPF); a non-negative id absent from stacks yields an empty stack
// and is counted in the returned missing total.
// The result is sorted by pid, tid, then descending value.
func assembleSamples(counts map[stackKey]uint64, stacks map[int32][]uint64, comms map[uint32]string) (samples []Sample, missing uint64) {
	samples = make([]Sample, 0, len(counts))
	for k, n := range counts {
		if n == 0 {
			continue
		}
		s := Sample{PID: k.PID, TID: k.TID, Comm: comms[k.TID], Value: n}
		var ok bool
		if s.UserStack, ok = stackFor(stacks, k.UserStackID); !ok {
			missing += n
		}
		if s.KernelStack, ok = stackFor(stacks, k.KernelStackID); !ok {
			missing += n
		}
		samples = append(samples, s)
	}
	slices.SortFunc(samples, func(a, b Sample) int {
		return cmp.Or(
			cmp.Compare(a.PID, b.PID),
			cmp.Compare(a.TID, b.TID),
			cmp.Compare(b.Value, a.Value),
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
