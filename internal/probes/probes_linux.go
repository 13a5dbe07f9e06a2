//go:build linux

package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
)

// Manager owns the loaded probe programs and their attachments. Its methods
// are safe for concurrent use.
type Manager struct {
	specs    []Spec
	objs     bpf.ProbeObjects // ProbeEntry and ProbeExit nil without cookies
	perProbe []probePrograms  // without cookies: the programs of each probe
	// Without cookies: the entry program's spec, the loaded maps its
	// copies share, and the copies with a USDT fetch built in, by (probe
	// index, usdt_specs index + 1), made as sites need them.
	entrySpec  *ebpf.ProgramSpec
	mapSpecs   map[string]*ebpf.MapSpec
	loadedMaps map[string]*ebpf.Map
	argsProgs  map[[2]uint32]*ebpf.Program
	tpLinks    []link.Link
	records    *ringbuf.Reader
	execs      *ringbuf.Reader
	att        *attacher

	delivered, malformed atomic.Uint64
	labelsUndecodable    atomic.Uint64
	closing              atomic.Bool

	runMu     sync.Mutex // one Run at a time
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}
	wg        sync.WaitGroup
}

// Open validates specs, loads the BPF programs, attaches the probes to the
// matching files of every running process and starts following execs.
// Records are read with Run.
func Open(specs []Spec, opts Options) (*Manager, error) {
	if err := ValidateSpecs(specs); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; a failure
	// to raise it is explained if a load then fails (memlock.Explain).
	_ = memlock.Raise()

	m := &Manager{specs: specs, stop: make(chan struct{})}
	spec, err := bpf.LoadProbe()
	if err != nil {
		return nil, fmt.Errorf("load probe BPF spec: %w", err)
	}
	argsUsed := uint32(0)
	if slices.ContainsFunc(specs, func(s Spec) bool { return len(s.Attributes) > 0 }) {
		argsUsed = 1
	} else {
		spec.Maps[bpf.ProbeMapScopeArgs].MaxEntries = 1
	}
	entryStacks := uint32(0)
	if slices.ContainsFunc(specs, func(s Spec) bool { return s.EntryStack }) {
		entryStacks = 1
	} else {
		spec.Maps[bpf.ProbeMapEntryStacks].MaxEntries = 1
	}
	for name, v := range map[string]any{
		"nr_probes":         uint32(len(specs)),
		"pidns_dev":         opts.PIDNamespace.Dev,
		"pidns_ino":         opts.PIDNamespace.Ino,
		"entry_stacks_used": entryStacks,
		"args_used":         argsUsed,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	loadOpts, err := scopemap.Share(spec, opts.OpenScopes, nil)
	if err != nil {
		return nil, err
	}
	if err := m.load(spec, loadOpts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load probe BPF programs: %+v", verr)
		}
		return nil, capabilities.Explain(fmt.Errorf("load probe BPF programs: %w", memlock.Explain(err)), capabilities.BPF, capabilities.Perfmon)
	}
	compiled := make([]compiledSpec, len(specs))
	for i, s := range specs {
		cfg := bpf.ProbeProbeConfig{MinDurationNs: uint64(s.MinDuration)}
		cfg.RateIntervalNs, cfg.RateBurstNs = rateLimit(s.MaxPerSecond)
		if s.MainThreadOnly {
			cfg.MainThreadOnly = 1
		}
		if s.LinkSamples && opts.OpenScopes != nil {
			cfg.LinkSamples = 1
		}
		if s.EntryStack {
			cfg.EntryStack = 1
		}
		compiled[i] = compileSpec(s)
		cfg.Args = uint32(len(compiled[i].attrs))
		if err := m.objs.ProbeConfigs.Put(uint32(i), cfg); err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("configure probe %q: %w", s.ID, err)
		}
	}
	if err := m.openKernelSide(); err != nil {
		_ = m.Close()
		return nil, err
	}
	m.att = newAttacher(opts.Proc, opts.Logger, compiled, m.programs)
	if m.perProbe == nil {
		// The labels' file is in the attach cookie: none without cookies.
		m.att.goLabels = newGoLabelFiles(func(i uint32, f bpf.ProbeGoProbeFile) error {
			return m.objs.GoProbeFiles.Put(i, f)
		}, opts.Logger).cookie
	} else {
		m.att.argsProgram = m.argsProgram
	}
	m.att.usdtArgs = newUSDTArgSpecs(func(i uint32, s *bpf.ProbeUsdtArgsSpec) error {
		return m.objs.UsdtSpecs.Put(i, s)
	}).cookie
	m.att.scanAll()

	pids := make(chan uint32, 1024)
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.readExecs(pids) }()
	go func() { defer m.wg.Done(); m.att.follow(m.stop, pids, opts.RescanInterval) }()
	return m, nil
}

// load loads spec's maps and programs. Where the kernel has attach cookies
// (5.15) one entry and one exit program serve every probe, the cookie
// carrying the probe index; before, each probe gets its own copies.
func (m *Manager) load(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) error {
	cookies := haveAttachCookies()
	if !cookies {
		if p, ok := spec.Programs[entryProgram]; ok {
			m.entrySpec = p.Copy()
		}
		m.mapSpecs = spec.Maps
		if err := splitPerProbe(spec, len(m.specs)); err != nil {
			return err
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		return err
	}
	defer coll.Close() // what was not taken below
	if !cookies {      // before Assign takes them from coll
		m.loadedMaps = make(map[string]*ebpf.Map, len(coll.Maps))
		for name, mp := range coll.Maps {
			c, err := mp.Clone()
			if err != nil {
				return err
			}
			m.loadedMaps[name] = c
		}
	}
	if err := coll.Assign(&m.objs.ProbeMaps); err != nil {
		return err
	}
	p := &m.objs.ProbePrograms
	p.ProbeExec, p.ProbeThreadExit = coll.DetachProgram("probe_exec"), coll.DetachProgram("probe_thread_exit")
	if cookies {
		p.ProbeEntry, p.ProbeExit = coll.DetachProgram(entryProgram), coll.DetachProgram(exitProgram)
		p.ProbeGoEntry, p.ProbeGoExit = coll.DetachProgram(goEntryProgram), coll.DetachProgram(goExitProgram)
		return nil
	}
	for i := range m.specs {
		var set probePrograms
		for j, name := range uprobePrograms {
			set[j] = coll.DetachProgram(perProbeName(name, i))
		}
		m.perProbe = append(m.perProbe, set)
	}
	return nil
}

// argsProgram returns probe's entry program with the USDT fetch args
// (usdt_specs index + 1) in place of its attach cookie, loaded the first
// time a site needs it (kernels without attach cookies; the attacher's
// lock serializes calls). It shares the maps of the loaded programs.
func (m *Manager) argsProgram(probe int, args uint32) (*ebpf.Program, error) {
	key := [2]uint32{uint32(probe), args}
	if p, ok := m.argsProgs[key]; ok {
		return p, nil
	}
	if m.entrySpec == nil {
		return nil, errors.New("no entry program spec")
	}
	p, err := withProbeIndex(m.entrySpec, probe|int(args)<<16)
	if err != nil {
		return nil, err
	}
	p.Name = fmt.Sprintf("%s_%d_%d", entryProgram, probe, args)
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Maps: m.mapSpecs, Programs: map[string]*ebpf.ProgramSpec{p.Name: p}},
		ebpf.CollectionOptions{MapReplacements: m.loadedMaps})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", p.Name, err)
	}
	defer coll.Close()
	prog := coll.DetachProgram(p.Name)
	if m.argsProgs == nil {
		m.argsProgs = make(map[[2]uint32]*ebpf.Program)
	}
	m.argsProgs[key] = prog
	return prog, nil
}

// haveAttachCookies reports whether uprobe programs can read their attach
// cookie (Linux 5.15); a variable so tests can take the other path.
var haveAttachCookies = func() bool {
	return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) == nil
}

// programs returns the programs of probe index i and the cookie to attach
// them with.
func (m *Manager) programs(i int) (probePrograms, uint64) {
	if m.perProbe == nil {
		p := &m.objs.ProbePrograms
		return probePrograms{p.ProbeEntry, p.ProbeExit, p.ProbeGoEntry, p.ProbeGoExit}, uint64(i)
	}
	return m.perProbe[i], 0
}

// openKernelSide attaches the thread exit and exec tracepoints and opens the
// ring buffers.
func (m *Manager) openKernelSide() error {
	for _, p := range []*ebpf.Program{m.objs.ProbeThreadExit, m.objs.ProbeExec} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return capabilities.Explain(fmt.Errorf("attach %s: %w", p, err), capabilities.BPF, capabilities.Perfmon)
		}
		m.tpLinks = append(m.tpLinks, l)
	}
	var err error
	if m.records, err = ringbuf.NewReader(m.objs.Records); err != nil {
		return fmt.Errorf("open probe records ring buffer: %w", err)
	}
	if m.execs, err = ringbuf.NewReader(m.objs.Execs); err != nil {
		return fmt.Errorf("open exec events ring buffer: %w", err)
	}
	return nil
}

// pollInterval bounds how long a record waits in the ring buffer when the
// BPF side did not wake the reader.
const pollInterval = 50 * time.Millisecond

// Run reads records and hands them to deliver, in batches, until ctx is done
// or the Manager is closed; then it returns nil. deliver runs on Run's
// goroutine and must not keep the slice. One Run at a time.
func (m *Manager) Run(ctx context.Context, deliver func([]capture.RawScope)) error {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.records == nil {
		return errors.New("probes: manager is closed")
	}
	// Flush interrupts a blocked Read (a deadline cannot: Read holds the
	// reader's lock while it waits).
	stop := context.AfterFunc(ctx, func() { _ = m.records.Flush() })
	defer stop()
	// The BPF side wakes the reader only when its buffer fills up; a poll
	// picks up the rest with at most pollInterval of delay.
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	pollDone := make(chan struct{})
	defer close(pollDone)
	go func() {
		for {
			select {
			case <-poll.C:
				_ = m.records.Flush()
			case <-pollDone:
				return
			}
		}
	}()
	stopped := func() bool { return ctx.Err() != nil || m.closing.Load() }
	return readRecords(ringAdapter{m.records}, len(m.specs), stopped, deliver, counters{
		delivered:   func(n uint64) { m.delivered.Add(n) },
		malformed:   func(n uint64) { m.malformed.Add(n) },
		undecodable: func(n uint64) { m.labelsUndecodable.Add(n) },
	})
}

func (m *Manager) readExecs(out chan<- uint32) {
	defer close(out)
	r := ringAdapter{m.execs}
	for {
		b, err := r.Read()
		if err != nil {
			return
		}
		pid, err := decodeExec(b)
		if err != nil {
			m.malformed.Add(1)
			continue
		}
		select {
		case out <- pid:
		case <-m.stop:
			return
		}
	}
}

// Stats returns the counters since Open.
func (m *Manager) Stats() Stats {
	var st Stats
	var per []bpf.ProbeProbeStats
	if err := m.objs.Stats.Lookup(uint32(0), &per); err == nil {
		for _, c := range per {
			st.Records += c.Records
			st.ExecDropped += c.ExecDropped
			st.Labels.Truncated += c.LabelsTruncated
			st.Labels.Unreadable += c.LabelsLost
		}
	}
	st.Drops = make([]ProbeDrops, len(m.specs))
	var drops []bpf.ProbeProbeDrops
	st.Labels.Undecodable = m.labelsUndecodable.Load()
	for i := range st.Drops {
		if err := m.objs.Drops.Lookup(uint32(i), &drops); err != nil {
			continue
		}
		for _, c := range drops {
			st.Drops[i].RateLimited += c.RateLimited
			st.Drops[i].RingBufferFull += c.RingbufFull
			st.Drops[i].Abandoned += c.Abandoned
		}
	}
	st.Delivered = m.delivered.Load()
	st.Malformed = m.malformed.Load()
	if m.att != nil {
		m.att.stats(&st)
	}
	return st
}

// Close detaches every probe and frees the BPF objects. It is idempotent;
// a running Run returns.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		var errs []error
		m.closing.Store(true)
		close(m.stop)
		if m.execs != nil {
			errs = append(errs, m.execs.Close())
		}
		m.wg.Wait()
		if m.att != nil {
			errs = append(errs, m.att.close())
		}
		for _, l := range m.tpLinks {
			errs = append(errs, l.Close())
		}
		if m.records != nil {
			_ = m.records.Flush() // interrupt Run
		}
		m.runMu.Lock() // Run has returned: the reader can go
		if m.records != nil {
			errs = append(errs, m.records.Close())
			m.records = nil
		}
		errs = append(errs, m.objs.Close())
		for _, set := range m.perProbe {
			for _, p := range set {
				errs = append(errs, p.Close())
			}
		}
		for _, p := range m.argsProgs {
			errs = append(errs, p.Close())
		}
		for _, mp := range m.loadedMaps {
			errs = append(errs, mp.Close())
		}
		m.runMu.Unlock()
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// ringAdapter turns ringbuf.Reader errors into the ringReader contract.
type ringAdapter struct{ r *ringbuf.Reader }

func (a ringAdapter) Read() ([]byte, error) {
	rec, err := a.r.Read()
	if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) || errors.Is(err, ringbuf.ErrFlushed) {
		return nil, errInterrupted
	}
	return rec.RawSample, err
}

func (a ringAdapter) Pending() bool { return a.r.AvailableBytes() > 0 }

// compiledSpec is a Spec prepared for matching files and symbols.
type compiledSpec struct {
	Spec
	file        *regexp.Regexp
	entry, exit symbolQuery
	attrs       []Attribute // Attributes, in record slot order
}

func compileSpec(s Spec) compiledSpec {
	c := compiledSpec{Spec: s, file: regexp.MustCompile(s.FileMatch), entry: newSymbolQuery(s.EntrySymbol)}
	c.attrs = s.ArgAttributes()
	if !s.Return {
		c.exit = newSymbolQuery(s.ExitSymbol)
	}
	return c
}
