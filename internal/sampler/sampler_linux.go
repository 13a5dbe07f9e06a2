//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

const (
	sampleRatePath = "/proc/sys/kernel/perf_event_max_sample_rate"
	onlineCPUsPath = "/sys/devices/system/cpu/online"
)

// Sampler samples on-CPU stacks with BPF. Its methods are safe for concurrent use.
type Sampler struct {
	mu     sync.Mutex
	objs   bpf.CpuObjects
	sizes  MapSizes
	bufs   *stackdrain.Buffers
	events []*perfEvent
	news   *stackdrain.Announcer
	closed bool
	// processes are the announcements NewProcesses hands on: news's own,
	// or, with unwind tables, those unwind has seen.
	processes <-chan capture.ProcessEvent
	unwind    *unwinder.Follower // nil: frame pointers only
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

	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; a failure
	// to raise it is explained if a load then fails (memlock.Explain).
	_ = memlock.Raise()

	s := &Sampler{sizes: opts.mapSizes(len(cpus))}
	spec, err := bpf.LoadCpu()
	if err != nil {
		return nil, fmt.Errorf("load cpu sampler BPF spec: %w", err)
	}
	for _, name := range []string{bpf.CpuMapCounts0, bpf.CpuMapCounts1} {
		spec.Maps[name].MaxEntries = s.sizes.Counts
	}
	for _, name := range []string{bpf.CpuMapStacks0, bpf.CpuMapStacks1} {
		spec.Maps[name].MaxEntries = s.sizes.Stacks
	}
	loadOpts, err := unwinder.Prepare(spec, opts.Unwind)
	if err != nil {
		return nil, err
	}
	if loadOpts, err = scopemap.Share(spec, opts.OpenScopes, loadOpts); err != nil {
		return nil, err
	}
	if err := spec.LoadAndAssign(&s.objs, loadOpts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load cpu sampler BPF program: %+v", verr)
		}
		return nil, fmt.Errorf("load cpu sampler BPF program: %w", memlock.Explain(err))
	}
	s.bufs, err = stackdrain.New(stackdrain.Maps{
		Config:     s.objs.Config,
		TargetPIDs: s.objs.TargetPids,
		Inflight:   s.objs.Inflight,
		Stats:      s.objs.Stats,
		Comms:      s.objs.Comms,
		Counts:     [2]*ebpf.Map{s.objs.Counts0, s.objs.Counts1},
		Stacks:     [2]*ebpf.Map{s.objs.Stacks0, s.objs.Stacks1},
		TraceAttrs: s.objs.ThreadCtxAttrs,
		// One sample adds 1: stacks missing at drain count in samples.
		CountsAreSamples: true,
	}, opts.PIDNamespace, opts.TargetPIDs)
	if err != nil {
		_ = s.objs.Close()
		return nil, err
	}
	if s.news, err = stackdrain.StartAnnouncer(s.objs.NewPids, s.objs.ForgetProcess, s.objs.ForgetExec); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.processes = s.news.Events()
	if opts.Unwind != nil {
		s.unwind = opts.Unwind.Follow(s.news.Events())
		s.processes = s.unwind.Events()
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

// Mechanism is how the samples are recorded: cpu-clock perf events.
func (s *Sampler) Mechanism() string { return Mechanism }

// NewProcesses returns the channel on which the pid (in
// Options.PIDNamespace) of each newly sampled user process is sent once,
// on its first sample after Open (and again if its pid is reused after it
// exited), so it can be inspected while it still runs. The channel is
// buffered (stackdrain.NewProcessesBuffer); notifications that find it full
// are dropped and counted in Stats.NewProcessDrops. It is closed by Close.
func (s *Sampler) NewProcesses() <-chan capture.ProcessEvent {
	return s.processes
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

// MapSizes returns the capacities the maps were loaded with.
func (s *Sampler) MapSizes() MapSizes { return s.sizes }

// SetTargets replaces the pid filter; an empty list samples every process.
func (s *Sampler) SetTargets(pids []uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("sampler is closed")
	}
	return s.bufs.SetTargets(pids)
}

// Drain returns the samples aggregated since the previous Drain and clears
// them; the program keeps sampling into the other map set meanwhile (see
// stackdrain.Buffers.Drain), so nothing is lost or counted twice.
func (s *Sampler) Drain() ([]capture.RawStack, capture.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, capture.Stats{}, errors.New("sampler is closed")
	}
	samples, st, err := s.bufs.Drain()
	if err == nil {
		st.NewProcessDrops += s.news.TakeDrops()
		if s.unwind != nil {
			s.unwind.AddStats(&st)
		}
	}
	return samples, st, err
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
	if s.news != nil {
		if err := s.news.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.unwind != nil {
		s.unwind.Wait() // ends when the announcements are closed
	}
	if err := s.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sampler: %w", err)
	}
	return nil
}
