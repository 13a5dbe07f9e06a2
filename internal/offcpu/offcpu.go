// Package offcpu loads the off-CPU BPF program (bpf/offcpu.bpf.c), attaches
// it to the sched_switch and sched_process_free BTF tracepoints and drains
// the time threads spent blocked, by stack, into plain Go values.
//
// Only voluntary sleeps are measured (a thread that called into the
// scheduler in a non-running state: locks, sleeps, I/O, page faults); time a
// preempted, still runnable thread waits on a runqueue is not off-CPU time
// here. Each wait is charged to the stack the thread blocked in, when it runs
// again, so a wait spanning a Drain is reported by the later Drain in full.
// The kernel stack is taken when the thread is switched back in, for waits
// of at least MinBlock; the user stack, depending on the Mechanism, by a BPF
// task work just before the thread returns to user space (Linux >= 6.18,
// bpf/offcpu.bpf.c) or when it goes to sleep (every kernel,
// bpf/offcpu_switchout.bpf.c).
//
// Kernel-facing code lives in offcpu_linux.go; this file holds the options,
// the result types and the pure helpers, which are tested without root.
package offcpu

import (
	"fmt"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

const (
	// MaxTargets is the capacity of the BPF pid filter (target_pids).
	MaxTargets = stackdrain.MaxTargets
	// MaxExcluded is the capacity of the BPF exclusion list (excluded_pids).
	MaxExcluded = 64
)

// Options configure a Tracer.
type Options struct {
	// MinBlock is the shortest wait recorded; shorter ones are dropped in BPF.
	MinBlock time.Duration
	// TargetPIDs are tgids (in PIDNamespace) to trace; empty traces every
	// process.
	TargetPIDs []uint32
	// ExcludePIDs are tgids (in PIDNamespace) never traced, typically the
	// collector's own.
	ExcludePIDs []uint32
	// PIDNamespace, when set, is the collector's own (child) pid namespace:
	// samples then carry pids as seen from it, and processes outside it are
	// not traced. Zero: host pids.
	PIDNamespace procfs.PIDNamespace
	// Mechanism chooses how user stacks are taken; "" is MechanismAuto.
	Mechanism Mechanism
	// Unwind, when set, walks user stacks with its unwind tables where
	// they are loaded (the tracer loads those of the processes it
	// announces), and with frame pointers elsewhere; nil: frame pointers
	// only.
	Unwind *unwinder.Tables
	// OpenScopes, when set, is the probes' maps of open scopes
	// (internal/scopemap): waits of a thread inside one carry it.
	OpenScopes *scopemap.Maps
}

func (o Options) validate() error {
	if o.MinBlock < 0 {
		return fmt.Errorf("MinBlock must not be negative, got %v", o.MinBlock)
	}
	if len(o.TargetPIDs) > MaxTargets {
		return fmt.Errorf("targets: %d pids exceed the BPF filter capacity %d", len(o.TargetPIDs), MaxTargets)
	}
	if len(o.ExcludePIDs) > MaxExcluded {
		return fmt.Errorf("off_cpu: %d excluded pids exceed the BPF capacity %d", len(o.ExcludePIDs), MaxExcluded)
	}
	return nil
}
