//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

const (
	sampleRatePath = "/proc/sys/kernel/perf_event_max_sample_rate"
	onlineCPUsPath = "/sys/devices/system/cpu/online"

	// flipGrace lets the generation flip become visible on every CPU before
	// the in-flight counters are read (see Drain).
	flipGrace = time.Millisecond
	// quiesceTimeout bounds the wait for running invocations; they take
	// microseconds with preemption disabled, so this is never reached in practice.
	quiesceTimeout = time.Second
)

// Sampler samples on-CPU stacks with BPF. Its methods are safe for concurrent use.
type Sampler struct {
	mu      sync.Mutex
	objs    bpf.CpuObjects
	events  []*perfEvent
	gen     uint32 // generation the program currently writes
	filter  bool
	targets map[uint32]struct{}
	closed  bool
}

type perfEvent struct {
	fd   int
	link link.Link // nil when attached with PERF_EVENT_IOC_SET_BPF
}

// Open loads the program, attaches it to every online CPU and starts sampling.
func Open(opts Options) (*Sampler, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	limit, err := readSampleRate()
	if err != nil {
		return nil, err
	}
	if err := checkSampleRate(opts.SamplesPerSecond, limit); err != nil {
		return nil, err
	}
	onlineRaw, err := os.ReadFile(onlineCPUsPath)
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}
	cpus, err := parseCPUList(string(onlineRaw))
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}

	// Kernels >= 5.11 charge BPF memory to the memory cgroup; without
	// CAP_SYS_RESOURCE this fails harmlessly, so the error is ignored.
	_ = rlimit.RemoveMemlock()

	s := &Sampler{targets: map[uint32]struct{}{}}
	if err := bpf.LoadCpuObjects(&s.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load cpu sampler BPF program: %+v", verr)
		}
		return nil, fmt.Errorf("load cpu sampler BPF program: %w", err)
	}
	if err := s.setTargetsLocked(opts.TargetPIDs); err != nil {
		_ = s.objs.Close()
		return nil, err
	}
	for _, cpu := range cpus {
		ev, err := openPerfEvent(cpu, opts.SamplesPerSecond, s.objs.SampleCpu)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.events = append(s.events, ev)
	}
	return s, nil
}

func readSampleRate() (uint64, error) {
	b, err := os.ReadFile(sampleRatePath)
	if err != nil {
		return 0, fmt.Errorf("read kernel.perf_event_max_sample_rate: %w", err)
	}
	return parseSampleRate(b)
}

// openPerfEvent opens a cpu-clock event on cpu in frequency mode, attaches
// prog and enables the event.
func openPerfEvent(cpu int, freq uint64, prog *ebpf.Program) (*perfEvent, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: freq,
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			// The kernel lowers the limit when sampling takes too long.
			if limit, rerr := readSampleRate(); rerr == nil && freq > limit {
				return nil, fmt.Errorf("open perf event on cpu %d: %w", cpu, checkSampleRate(freq, limit))
			}
		}
		return nil, fmt.Errorf("open cpu-clock perf event on cpu %d at %d Hz: %w", cpu, freq, err)
	}
	ev := &perfEvent{fd: fd}
	ev.link, err = link.AttachRawLink(link.RawLinkOptions{
		Target:  fd,
		Program: prog,
		Attach:  ebpf.AttachPerfEvent,
	})
	if err != nil {
		// Kernels before 5.15 have no perf_event BPF links.
		if ierr := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); ierr != nil {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("attach BPF program to perf event on cpu %d: %w", cpu, errors.Join(err, ierr))
		}
		ev.link = nil
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		_ = ev.close()
		return nil, fmt.Errorf("enable perf event on cpu %d: %w", cpu, err)
	}
	return ev, nil
}

func (ev *perfEvent) close() error {
	_ = unix.IoctlSetInt(ev.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	var errs []error
	if ev.link != nil {
		errs = append(errs, ev.link.Close())
	}
	errs = append(errs, unix.Close(ev.fd))
	return errors.Join(errs...)
}

// SetTargets replaces the pid filter; an empty list samples every process.
func (s *Sampler) SetTargets(pids []uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("sampler is closed")
	}
	if len(pids) > MaxTargets {
		return fmt.Errorf("targets: %d pids exceed the BPF filter capacity %d", len(pids), MaxTargets)
	}
	return s.setTargetsLocked(pids)
}

// setTargetsLocked adds new pids before enabling the filter and disables the
// filter before removing pids, so a change never briefly samples nothing.
func (s *Sampler) setTargetsLocked(pids []uint32) error {
	want := make(map[uint32]struct{}, len(pids))
	for _, p := range pids {
		want[p] = struct{}{}
	}
	one := uint8(1)
	for p := range want {
		if _, ok := s.targets[p]; ok {
			continue
		}
		if err := s.objs.TargetPids.Put(p, one); err != nil {
			return fmt.Errorf("add target pid %d: %w", p, err)
		}
		s.targets[p] = struct{}{}
	}
	if err := s.writeConfig(s.gen, len(want) > 0); err != nil {
		return err
	}
	for p := range s.targets {
		if _, ok := want[p]; ok {
			continue
		}
		if err := s.objs.TargetPids.Delete(p); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove target pid %d: %w", p, err)
		}
		delete(s.targets, p)
	}
	return nil
}

func (s *Sampler) writeConfig(gen uint32, filter bool) error {
	cfg := bpf.CpuSamplerConfig{Generation: gen}
	if filter {
		cfg.FilterEnabled = 1
	}
	if err := s.objs.Config.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write sampler config: %w", err)
	}
	s.gen, s.filter = gen, filter
	return nil
}

// Drain returns the samples aggregated since the previous Drain and clears
// them. The program keeps writing into the other map set meanwhile:
//  1. flip config.generation, so new invocations write the other set;
//  2. after a short grace period, wait until every CPU finished the
//     invocation it was running, which may still use the old set;
//  3. read and clear the old set, which nothing writes any more.
func (s *Sampler) Drain() ([]RawSample, Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, Stats{}, errors.New("sampler is closed")
	}
	old := s.gen
	if err := s.writeConfig(old^1, s.filter); err != nil {
		return nil, Stats{}, fmt.Errorf("drain: %w", err)
	}
	if err := s.waitQuiescent(); err != nil {
		return nil, Stats{}, fmt.Errorf("drain: %w", err)
	}
	counts, stacks := s.objs.Counts0, s.objs.Stacks0
	if old == 1 {
		counts, stacks = s.objs.Counts1, s.objs.Stacks1
	}
	countMap, err := drainCounts(counts)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("drain counts: %w", err)
	}
	stackMap, err := drainStacks(stacks)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("drain stacks: %w", err)
	}
	st, err := s.drainStats(old)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("drain stats: %w", err)
	}
	samples, missing := assembleSamples(countMap, stackMap, s.readComms(countMap))
	st.StackMissing = missing
	return samples, st, nil
}

func (s *Sampler) waitQuiescent() error {
	time.Sleep(flipGrace)
	var before []bpf.CpuInflightSeq
	if err := s.objs.Inflight.Lookup(uint32(0), &before); err != nil {
		return fmt.Errorf("read inflight: %w", err)
	}
	deadline := time.Now().Add(quiesceTimeout)
	for {
		var now []bpf.CpuInflightSeq
		if err := s.objs.Inflight.Lookup(uint32(0), &now); err != nil {
			return fmt.Errorf("read inflight: %w", err)
		}
		if quiescent(toInflight(before), toInflight(now)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BPF program still running %v after the generation flip", quiesceTimeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func toInflight(v []bpf.CpuInflightSeq) []inflightSeq {
	out := make([]inflightSeq, len(v))
	for i, x := range v {
		out[i] = inflightSeq{Enter: x.Enter, Exit: x.Exit}
	}
	return out
}

// drainCounts reads every entry of a counts map and deletes it.
func drainCounts(m *ebpf.Map) (map[stackKey]uint64, error) {
	out := map[stackKey]uint64{}
	var (
		k bpf.CpuStackKey
		v uint64
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[stackKey{PID: k.Pid, TID: k.Tid, UserStackID: k.UserStackId, KernelStackID: k.KernelStackId}] += v
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for key := range out {
		bk := bpf.CpuStackKey{Pid: key.PID, Tid: key.TID, UserStackId: key.UserStackID, KernelStackId: key.KernelStackID}
		if err := m.Delete(bk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, err
		}
	}
	return out, nil
}

// drainStacks reads every stack of a stack-trace map and deletes it,
// including stacks whose count update failed.
func drainStacks(m *ebpf.Map) (map[int32][]uint64, error) {
	out := map[int32][]uint64{}
	var (
		id     uint32
		frames = make([]uint64, m.ValueSize()/8)
	)
	it := m.Iterate()
	for it.Next(&id, &frames) {
		out[int32(id)] = trimStack(frames)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for id := range out {
		if err := m.Delete(uint32(id)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, err
		}
	}
	return out, nil
}

// readComms looks up the thread names of the drained tids.
func (s *Sampler) readComms(counts map[stackKey]uint64) map[uint32]string {
	out := map[uint32]string{}
	var c bpf.CpuThreadComm
	for k := range counts {
		if _, done := out[k.TID]; done {
			continue
		}
		name := ""
		if err := s.objs.Comms.Lookup(k.TID, &c); err == nil {
			name = commString(c.Comm[:])
		}
		out[k.TID] = name
	}
	return out
}

// drainStats sums and zeroes the per-CPU counters of an idle generation.
func (s *Sampler) drainStats(gen uint32) (Stats, error) {
	var perCPU []bpf.CpuSamplerStats
	if err := s.objs.Stats.Lookup(gen, &perCPU); err != nil {
		return Stats{}, err
	}
	var st Stats
	for _, c := range perCPU {
		st.Recorded += c.Recorded
		st.LostMapFull += c.LostMapFull
		st.UserStackErrors += c.UserStackErrors
		st.KernelStackErrors += c.KernelStackErrors
	}
	if err := s.objs.Stats.Put(gen, make([]bpf.CpuSamplerStats, len(perCPU))); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// Close stops sampling and releases every kernel object. It is idempotent.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, ev := range slices.Backward(s.events) {
		if err := ev.close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.events = nil
	if err := s.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sampler: %w", err)
	}
	return nil
}
