//go:build linux

package stackdrain

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

const (
	// flipGrace lets the generation flip become visible on every CPU before
	// the in-flight counters are read (see Drain), and a program's entry
	// count before that: on arm64 its atomic add orders nothing.
	flipGrace = time.Millisecond
	// quiesceTimeout bounds the wait for running invocations; they take
	// microseconds with preemption disabled, so this is never reached in practice.
	quiesceTimeout = time.Second
)

// Maps are the kernel objects of one double-buffered stack aggregation; the
// names are those of the maps in bpf/cpu.bpf.c and bpf/offcpu.bpf.c.
//
// The stack maps hold u32 stack id -> zero-padded frames: hash maps whose
// ids the program assigns itself (cpu.bpf.c and offcpu.bpf.c store stacks by
// content hash, bpf/stackstore.h) or BPF_MAP_TYPE_STACK_TRACE maps filled by
// bpf_get_stackid. Both are read and cleared the same way. Every
// stack id in counts_N refers to stacks_N: a program writes a count and its
// stacks in the same generation.
type Maps struct {
	Config     *ebpf.Map // array[1] of struct sampler_config
	TargetPIDs *ebpf.Map // host tgid -> u8
	Inflight   *ebpf.Map // per-CPU struct inflight_seq
	Stats      *ebpf.Map // per-CPU struct sampler_stats, indexed by generation
	Comms      *ebpf.Map // tid -> struct thread_comm
	Counts     [2]*ebpf.Map
	Stacks     [2]*ebpf.Map
	// TraceAttrs (nil: none) holds the packed attributes of thread
	// contexts by the keys' trace_attrs_id (bpf/threadctx.h): an LRU map,
	// read, not cleared.
	TraceAttrs *ebpf.Map
	// CountsAreSamples says the counts values are sample counts (CPU), so
	// stacks missing at drain are counted in samples; false: weights such as
	// nanoseconds (off-CPU), counted per aggregated entry.
	CountsAreSamples bool
}

// Buffers drains one program's aggregation. It is not safe for concurrent
// use; its owner serializes calls.
type Buffers struct {
	maps    Maps
	gen     uint32 // generation the program currently writes
	filter  bool
	pidns   procfs.PIDNamespace
	targets map[uint32]struct{}
}

// New takes over the maps of a loaded (not yet attached) program: it writes
// the config with generation 0, the pid namespace ids are reported in (zero:
// host ids) and the given targets (pids in that namespace).
func New(maps Maps, pidns procfs.PIDNamespace, targets []uint32) (*Buffers, error) {
	b := &Buffers{maps: maps, pidns: pidns, targets: map[uint32]struct{}{}}
	if err := b.SetTargets(targets); err != nil {
		return nil, err
	}
	return b, nil
}

// SetTargets replaces the pid filter; an empty list records every process.
// New pids are added before the filter is enabled and the filter is disabled
// before pids are removed, so a change never briefly records nothing.
func (b *Buffers) SetTargets(pids []uint32) error {
	if len(pids) > MaxTargets {
		return fmt.Errorf("targets: %d pids exceed the BPF filter capacity %d", len(pids), MaxTargets)
	}
	want := make(map[uint32]struct{}, len(pids))
	for _, p := range pids {
		want[p] = struct{}{}
	}
	one := uint8(1)
	for p := range want {
		if _, ok := b.targets[p]; ok {
			continue
		}
		if err := b.maps.TargetPIDs.Put(p, one); err != nil {
			return fmt.Errorf("add target pid %d: %w", p, err)
		}
		b.targets[p] = struct{}{}
	}
	if err := b.writeConfig(b.gen, len(want) > 0); err != nil {
		return err
	}
	for p := range b.targets {
		if _, ok := want[p]; ok {
			continue
		}
		if err := b.maps.TargetPIDs.Delete(p); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove target pid %d: %w", p, err)
		}
		delete(b.targets, p)
	}
	return nil
}

func (b *Buffers) writeConfig(gen uint32, filter bool) error {
	cfg := config{Generation: gen, PidnsDev: b.pidns.Dev, PidnsIno: b.pidns.Ino}
	if filter {
		cfg.FilterEnabled = 1
	}
	if err := b.maps.Config.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	b.gen, b.filter = gen, filter
	return nil
}

// Drain returns the records aggregated since the previous Drain and clears
// them. The program keeps writing into the other map set meanwhile:
//  1. flip config.generation, so new invocations write the other set;
//  2. after a short grace period, wait until every CPU finished the
//     invocation it was running, which may still use the old set;
//  3. read and clear the old set, which nothing writes any more.
func (b *Buffers) Drain() ([]capture.RawStack, capture.Stats, error) {
	old := b.gen
	if err := b.writeConfig(old^1, b.filter); err != nil {
		return nil, capture.Stats{}, fmt.Errorf("drain: %w", err)
	}
	if err := b.waitQuiescent(); err != nil {
		return nil, capture.Stats{}, fmt.Errorf("drain: %w", err)
	}
	counts, err := drainCounts(b.maps.Counts[old])
	if err != nil {
		return nil, capture.Stats{}, fmt.Errorf("drain counts: %w", err)
	}
	stacks, err := drainStacks(b.maps.Stacks[old])
	if err != nil {
		return nil, capture.Stats{}, fmt.Errorf("drain stacks: %w", err)
	}
	st, err := b.drainStats(old)
	if err != nil {
		return nil, capture.Stats{}, fmt.Errorf("drain stats: %w", err)
	}
	samples, userMissing, kernelMissing := assembleSamples(counts, stacks, b.readComms(counts), b.maps.CountsAreSamples)
	b.addTraceAttrs(samples, counts)
	st.UserStackLost[capture.StackMissing] = userMissing
	st.KernelStackLost[capture.StackMissing] = kernelMissing
	return samples, st, nil
}

func (b *Buffers) waitQuiescent() error {
	time.Sleep(flipGrace)
	var before []inflightSeq
	if err := b.maps.Inflight.Lookup(uint32(0), &before); err != nil {
		return fmt.Errorf("read inflight: %w", err)
	}
	deadline := time.Now().Add(quiesceTimeout)
	for {
		var now []inflightSeq
		if err := b.maps.Inflight.Lookup(uint32(0), &now); err != nil {
			return fmt.Errorf("read inflight: %w", err)
		}
		if quiescent(before, now) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BPF program still running %v after the generation flip", quiesceTimeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// addTraceAttrs gives the samples with a thread context the attributes
// their keys name, and those of Go processes their labels, looked up once
// per id.
func (b *Buffers) addTraceAttrs(samples []capture.RawStack, counts map[stackKey]uint64) {
	if b.maps.TraceAttrs == nil {
		return
	}
	words := make([]uint64, b.maps.TraceAttrs.ValueSize()/8)
	attrs := map[uint32][]byte{}
	lookup := func(id uint32) {
		if _, done := attrs[id]; done {
			return
		}
		attrs[id] = nil // evicted meanwhile: none
		if err := b.maps.TraceAttrs.Lookup(id, words); err == nil {
			attrs[id] = UnpackAttrs(words)
		}
	}
	for k := range counts {
		if k.TraceAttrsId >= 0 && k.TraceId != ([16]uint8{}) {
			lookup(uint32(k.TraceAttrsId))
		}
		if k.GoLabelsId != 0 {
			lookup(k.GoLabelsId)
		}
	}
	for i := range samples {
		if t := samples[i].Trace; t != nil && t.AttrsID >= 0 {
			t.Attrs = attrs[uint32(t.AttrsID)]
		}
		if l := samples[i].GoLabels; l != nil {
			l.Data = attrs[l.ID]
		}
	}
}

// readComms looks up the thread names of the drained tids.
func (b *Buffers) readComms(counts map[stackKey]uint64) map[uint32]string {
	out := map[uint32]string{}
	var c threadComm
	for k := range counts {
		if _, done := out[k.Tid]; done {
			continue
		}
		name := ""
		if err := b.maps.Comms.Lookup(k.Tid, &c); err == nil {
			name = commString(c.Comm[:])
		}
		out[k.Tid] = name
	}
	return out
}

// drainStats sums and zeroes the per-CPU counters of an idle generation.
func (b *Buffers) drainStats(gen uint32) (capture.Stats, error) {
	var perCPU []counters
	if err := b.maps.Stats.Lookup(gen, &perCPU); err != nil {
		return capture.Stats{}, err
	}
	var st capture.Stats
	for _, c := range perCPU {
		addCounters(&st, c)
	}
	if err := b.maps.Stats.Put(gen, make([]counters, len(perCPU))); err != nil {
		return capture.Stats{}, err
	}
	return st, nil
}
