//go:build linux

package offcpu

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
)

// Tracer measures off-CPU time with BPF. Its methods are safe for concurrent use.
type Tracer struct {
	mu     sync.Mutex
	objs   bpf.OffcpuObjects
	bufs   *stackdrain.Buffers
	links  []link.Link
	closed bool
}

// Open loads the program, configures it and attaches it to the scheduler
// tracepoints; waits are measured from then on.
func Open(opts Options) (*Tracer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	// Kernels >= 5.11 charge BPF memory to the memory cgroup; without
	// CAP_SYS_RESOURCE this fails harmlessly, so the error is ignored.
	_ = rlimit.RemoveMemlock()

	spec, err := bpf.LoadOffcpu()
	if err != nil {
		return nil, fmt.Errorf("load off-CPU BPF spec: %w", err)
	}
	if err := spec.Variables["min_block_ns"].Set(uint64(opts.MinBlock.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("set off_cpu::min_block: %w", err)
	}
	t := &Tracer{}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load off-CPU BPF program: %+v", verr)
		}
		return nil, fmt.Errorf("load off-CPU BPF program: %w", err)
	}
	one := uint8(1)
	for _, pid := range opts.ExcludePIDs {
		if err := t.objs.ExcludedPids.Put(pid, one); err != nil {
			_ = t.objs.Close()
			return nil, fmt.Errorf("exclude pid %d: %w", pid, err)
		}
	}
	t.bufs, err = stackdrain.New(stackdrain.Maps{
		Config:     t.objs.Config,
		TargetPIDs: t.objs.TargetPids,
		Inflight:   t.objs.Inflight,
		Stats:      t.objs.Stats,
		Comms:      t.objs.Comms,
		Counts:     [2]*ebpf.Map{t.objs.Counts0, t.objs.Counts1},
		Stacks:     [2]*ebpf.Map{t.objs.Stacks0, t.objs.Stacks1},
	}, opts.PIDNamespace, opts.TargetPIDs)
	if err != nil {
		_ = t.objs.Close()
		return nil, err
	}
	// The free hook goes first, so no pending wait of an exited thread is left behind.
	for _, p := range []*ebpf.Program{t.objs.OffcpuFree, t.objs.OffcpuSwitch} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("attach off-CPU program %s: %w", p, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// SetTargets replaces the pid filter; an empty list traces every process.
// Waits that began before the change are still counted when they end.
func (t *Tracer) SetTargets(pids []uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("off-CPU tracer is closed")
	}
	return t.bufs.SetTargets(pids)
}

// Drain returns the blocked time aggregated since the previous Drain, by
// thread and stack, and clears it. Waits still in progress are not included;
// they are reported in full by the Drain after they end.
func (t *Tracer) Drain() ([]RawSample, Stats, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, Stats{}, errors.New("off-CPU tracer is closed")
	}
	return t.bufs.Drain()
}

// Close detaches the programs and releases every kernel object. It is idempotent.
func (t *Tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for _, l := range slices.Backward(t.links) {
		errs = append(errs, l.Close())
	}
	t.links = nil
	errs = append(errs, t.objs.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close off-CPU tracer: %w", err)
	}
	return nil
}
