//go:build linux

package offcpu

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// Tracer measures off-CPU time with BPF. Its methods are safe for concurrent use.
type Tracer struct {
	mu        sync.Mutex
	mechanism Mechanism
	objs      kernelObjects
	pending   *ebpf.Map   // task_work only: waits whose user stack is not taken yet
	walk      []io.Closer // switch_out only: the walk program and its program array
	bufs      *stackdrain.Buffers
	news      *stackdrain.Announcer
	unwind    *unwinder.Follower // nil: frame pointers only
	processes <-chan capture.ProcessEvent
	links     []link.Link
	closed    bool
}

// kernelObjects are the maps and programs the two off-CPU programs have in
// common (bpf/offcpu.h), whichever was loaded, by name.
type kernelObjects struct {
	Config        *ebpf.Map     `ebpf:"config"`
	TargetPIDs    *ebpf.Map     `ebpf:"target_pids"`
	Inflight      *ebpf.Map     `ebpf:"inflight"`
	Stats         *ebpf.Map     `ebpf:"stats"`
	Comms         *ebpf.Map     `ebpf:"comms"`
	Counts0       *ebpf.Map     `ebpf:"counts_0"`
	Counts1       *ebpf.Map     `ebpf:"counts_1"`
	Stacks0       *ebpf.Map     `ebpf:"stacks_0"`
	Stacks1       *ebpf.Map     `ebpf:"stacks_1"`
	ExcludedPIDs  *ebpf.Map     `ebpf:"excluded_pids"`
	NewPIDs       *ebpf.Map     `ebpf:"new_pids"`
	TraceAttrs    *ebpf.Map     `ebpf:"thread_ctx_attrs"`
	Sched         *ebpf.Program `ebpf:"offcpu_switch"`  // tp_btf sched_switch
	Free          *ebpf.Program `ebpf:"offcpu_free"`    // tp_btf sched_process_free
	ForgetProcess *ebpf.Program `ebpf:"forget_process"` // tp_btf sched_process_exit
	ForgetExec    *ebpf.Program `ebpf:"forget_exec"`    // tp_btf sched_process_exec
}

// taskWorkObjects are the task_work program's objects.
type taskWorkObjects struct {
	kernelObjects
	Pending *ebpf.Map `ebpf:"pending"`
}

// switchOutObjects are the switch_out program's objects: the switch
// tail-calls Capture through WalkProgs for a switch-out, and the program
// that walks user stacks with unwind tables tail-calls itself.
type switchOutObjects struct {
	kernelObjects
	WalkProgs *ebpf.Map     `ebpf:"walk_progs"`
	Walk      *ebpf.Program `ebpf:"walk_switch_out"`
	Capture   *ebpf.Program `ebpf:"capture_switch_out"`
}

// drainMaps are the maps stackdrain reads.
func (o *kernelObjects) drainMaps() stackdrain.Maps {
	return stackdrain.Maps{
		Config: o.Config, TargetPIDs: o.TargetPIDs, Inflight: o.Inflight, Stats: o.Stats, Comms: o.Comms,
		Counts: [2]*ebpf.Map{o.Counts0, o.Counts1}, Stacks: [2]*ebpf.Map{o.Stacks0, o.Stacks1}, TraceAttrs: o.TraceAttrs,
	}
}

// Close closes every object.
func (o *kernelObjects) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{o.Config, o.TargetPIDs, o.Inflight, o.Stats, o.Comms, o.Counts0, o.Counts1,
		o.Stacks0, o.Stacks1, o.ExcludedPIDs, o.NewPIDs, o.TraceAttrs} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	for _, p := range []*ebpf.Program{o.Sched, o.Free, o.ForgetProcess, o.ForgetExec} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// Open loads the program of the chosen mechanism, configures it and
// attaches it to the scheduler tracepoints; waits are measured from then on.
// On a kernel that cannot run off-CPU profiling at all the error wraps
// ebpf.ErrNotSupported.
func Open(opts Options) (*Tracer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	want, err := ParseMechanism(string(opts.Mechanism))
	if err != nil {
		return nil, err
	}
	mech, err := choose(want, missingTaskWorkFeatures())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ebpf.ErrNotSupported)
	}
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; a failure
	// to raise it is explained if a load then fails (memlock.Explain).
	_ = memlock.Raise()

	t := &Tracer{mechanism: mech}
	if t.objs, t.pending, t.walk, err = load(mech, opts); err != nil {
		return nil, err
	}
	one := uint8(1)
	for _, pid := range opts.ExcludePIDs {
		if err := t.objs.ExcludedPIDs.Put(pid, one); err != nil {
			_ = t.closeObjects()
			return nil, fmt.Errorf("exclude pid %d: %w", pid, err)
		}
	}
	t.bufs, err = stackdrain.New(t.objs.drainMaps(), opts.PIDNamespace, opts.TargetPIDs)
	if err != nil {
		_ = t.closeObjects()
		return nil, err
	}
	if t.news, err = stackdrain.StartAnnouncer(t.objs.NewPIDs, t.objs.ForgetProcess, t.objs.ForgetExec); err != nil {
		_ = t.closeObjects()
		return nil, err
	}
	t.processes = t.news.Events()
	if opts.Unwind != nil {
		t.unwind = opts.Unwind.Follow(t.news.Events())
		t.processes = t.unwind.Events()
	}
	// The free hook goes first, so no wait of an exited thread is left behind.
	for _, p := range []*ebpf.Program{t.objs.Free, t.objs.Sched} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("attach off-CPU program %s: %w", p, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// load loads the program of mech with min_block set, sharing the unwind
// maps of opts.Unwind; pending is the task_work program's map of waits whose
// user stack is not taken yet, walk the switch_out program's walk objects.
func load(mech Mechanism, opts Options) (o kernelObjects, pending *ebpf.Map, walk []io.Closer, err error) {
	var spec *ebpf.CollectionSpec
	if mech == MechanismTaskWork {
		spec, err = bpf.LoadOffcpu()
	} else {
		spec, err = bpf.LoadOffcpuSwitchout()
	}
	if err != nil {
		return kernelObjects{}, nil, nil, fmt.Errorf("load off-CPU BPF spec: %w", err)
	}
	if err := spec.Variables["min_block_ns"].Set(uint64(opts.MinBlock.Nanoseconds())); err != nil {
		return kernelObjects{}, nil, nil, fmt.Errorf("set min_block_ns: %w", err)
	}
	loadOpts, err := unwinder.Prepare(spec, opts.Unwind)
	if err != nil {
		return kernelObjects{}, nil, nil, err
	}
	if loadOpts, err = scopemap.Share(spec, opts.OpenScopes, loadOpts); err != nil {
		return kernelObjects{}, nil, nil, err
	}
	if mech == MechanismTaskWork {
		var tw taskWorkObjects
		err = spec.LoadAndAssign(&tw, loadOpts)
		o, pending = tw.kernelObjects, tw.Pending
	} else {
		var so switchOutObjects
		err = spec.LoadAndAssign(&so, loadOpts)
		o, walk = so.kernelObjects, []io.Closer{so.Walk, so.Capture, so.WalkProgs}
	}
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return kernelObjects{}, nil, nil, fmt.Errorf("load off-CPU BPF program (%s): %+v", mech, verr)
		}
		return kernelObjects{}, nil, nil, fmt.Errorf("load off-CPU BPF program (%s): %w", mech, memlock.Explain(err))
	}
	return o, pending, walk, nil
}

// missingTaskWorkFeatures returns what the running kernel lacks of
// taskWorkNeeds, read from its BTF and probed with cilium/ebpf.
func missingTaskWorkFeatures() []kernelFeature {
	spec, err := btf.LoadKernelSpec()
	var missing []kernelFeature
	for _, f := range taskWorkNeeds {
		var ok bool
		switch {
		case err != nil:
		case f.kind == "kfunc":
			var fn *btf.Func
			ok = spec.TypeByName(f.name, &fn) == nil
		case f.name == "prev_state":
			ok = schedSwitchArgs(spec) >= 4
		case f.name == "task storage":
			ok = features.HaveMapType(ebpf.TaskStorage) == nil
		}
		if !ok {
			missing = append(missing, f)
		}
	}
	return missing
}

// schedSwitchArgs returns the number of arguments of the sched_switch
// tracepoint (the first parameter of btf_trace_sched_switch is the probe's
// data, not an argument), or -1 when it cannot be read.
func schedSwitchArgs(spec *btf.Spec) int {
	var td *btf.Typedef
	if spec.TypeByName("btf_trace_sched_switch", &td) != nil {
		return -1
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return -1
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return -1
	}
	return len(proto.Params) - 1
}

// closeObjects closes the loaded maps and programs.
func (t *Tracer) closeObjects() error {
	err := t.objs.Close()
	if t.pending != nil {
		err = errors.Join(err, t.pending.Close())
	}
	for _, c := range t.walk {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Mechanism returns the mechanism in use.
func (t *Tracer) Mechanism() string { return string(t.mechanism) }

// NewProcesses returns the channel on which the pid (in
// Options.PIDNamespace) of each newly recorded user process is sent once
// (see stackdrain.Announcer), so it can be inspected while it still runs.
// It is closed by Close.
func (t *Tracer) NewProcesses() <-chan capture.ProcessEvent { return t.processes }

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
func (t *Tracer) Drain() ([]capture.RawStack, capture.Stats, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, capture.Stats{}, errors.New("off-CPU tracer is closed")
	}
	samples, st, err := t.bufs.Drain()
	if err == nil {
		st.NewProcessDrops += t.news.TakeDrops()
		if t.unwind != nil {
			t.unwind.AddStats(&st)
		}
	}
	return samples, st, err
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
	if t.news != nil {
		errs = append(errs, t.news.Close())
	}
	if t.unwind != nil {
		t.unwind.Wait() // ends when the announcements are closed
	}
	errs = append(errs, t.closeObjects())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close off-CPU tracer: %w", err)
	}
	return nil
}
