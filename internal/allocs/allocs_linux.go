//go:build linux

package allocs

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// Bounds on opening executables (see procfs.Deadline): on FUSE or a dead
// network file system an open can block forever.
const (
	openTimeout   = 2 * time.Second
	maxStuckOpens = 16
	flushTimeout  = time.Second
)

// Manager probes the allocation hooks of the Go executables of the
// processes it finds, and keeps their heap profiles (Tracker).
type Manager struct {
	opts     Options
	objs     bpf.AllocObjects
	reader   *ringbuf.Reader
	deadline *procfs.Deadline
	self     uint32
	usdt     bool            // otel_memory probes in use
	targets  map[uint32]bool // nil: every process
	specs    usdtSpecs
	stop     chan struct{}
	flushed  chan struct{} // the reader read what was in the ring at a Flush
	execs    chan uint32   // processes that exec'ed, from the reader to follow
	execLink link.Link
	wg       sync.WaitGroup

	mu      sync.Mutex
	tracker *Tracker
	files   map[fileID]*goFile
	// usdtFiles: files looked at for otel_memory probes.
	usdtFiles map[fileID]*usdtFile
	procs     map[uint32]bool // processes inspected
	stats     Stats
	warned    map[string]bool
	closed    bool
}

type fileID struct{ dev, inode uint64 }

// goFile is what was found of one executable: its hooks and labels, the
// uprobes on them; err: not probed (not Go, a release not known, ...).
type goFile struct {
	hooks   Hooks
	progs   []elf.ProgHeader // to find a process's load bias
	gLabels uint32
	layout  golabels.Layout
	links   []link.Link
	err     error
}

// Open loads the allocation programs and starts following processes.
func Open(opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	_ = memlock.Raise()
	spec, err := bpf.LoadAlloc()
	if err != nil {
		return nil, fmt.Errorf("load allocation BPF spec: %w", err)
	}
	vars := map[string]any{"pidns_dev": opts.PIDNamespace.Dev, "pidns_ino": opts.PIDNamespace.Ino, "usdt_interval": opts.USDTInterval}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	m := &Manager{
		opts: opts, deadline: procfs.NewDeadline(openTimeout, maxStuckOpens), self: uint32(os.Getpid()),
		stop: make(chan struct{}), flushed: make(chan struct{}, 1), tracker: NewTracker(opts.MaxLive),
		files: map[fileID]*goFile{}, usdtFiles: map[fileID]*usdtFile{}, procs: map[uint32]bool{}, warned: map[string]bool{},
		execs: make(chan uint32, maxPendingExecs),
		usdt:  opts.USDT,
	}
	if len(opts.TargetPIDs) > 0 {
		// Uprobes fire in every process mapping a probed file.
		m.targets = make(map[uint32]bool, len(opts.TargetPIDs))
		for _, pid := range opts.TargetPIDs {
			m.targets[pid] = true
		}
	}
	if m.usdt && !haveAttachCookies() {
		m.usdt = false
		opts.Logger.Warn("otel_memory probes need attach cookies (Linux 5.15): no allocation profiles from them")
	}
	m.specs = usdtSpecs{index: map[bpf.AllocUsdtArgsSpec]uint32{}, put: func(i uint32, s *bpf.AllocUsdtArgsSpec) error {
		return m.objs.UsdtSpecs.Put(i, s)
	}}
	if err := m.loadObjects(spec); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load allocation BPF programs: %+v", verr)
		}
		return nil, capabilities.Explain(fmt.Errorf("load allocation BPF programs: %w", memlock.Explain(err)), capabilities.BPF, capabilities.Perfmon)
	}
	if m.reader, err = ringbuf.NewReader(m.objs.AllocEvents); err != nil {
		_ = m.objs.Close()
		return nil, fmt.Errorf("open allocation events: %w", err)
	}
	if m.execLink, err = link.AttachTracing(link.TracingOptions{Program: m.objs.AllocExec}); err != nil {
		_ = m.reader.Close()
		_ = m.objs.Close()
		return nil, fmt.Errorf("attach the exec tracepoint of allocation profiles: %w", err)
	}
	m.scan()
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.read() }()
	go func() { defer m.wg.Done(); m.follow() }()
	return m, nil
}

// Times after an exec at which the process is looked at: its executable
// is mapped at exec, its libraries shortly after by the dynamic loader.
var execInspectDelays = []time.Duration{0, 500 * time.Millisecond}

// maxPendingExecs bounds the execs waiting to be looked at; past it an
// exec is left to no scan (counted: Stats.ExecsDropped).
const maxPendingExecs = 4096

type pendingExec struct {
	pid  uint32
	due  time.Time
	next int // index into execInspectDelays
}

// follow looks at processes that exec'ed, and for new ones every rescan
// interval.
func (m *Manager) follow() {
	t := time.NewTicker(m.opts.RescanInterval)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var pending []pendingExec
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.scan()
		case pid := <-m.execs:
			m.forget(pid)
			m.mu.Lock()
			m.procs[pid] = true
			m.mu.Unlock()
			pending = append(pending, pendingExec{pid: pid, due: time.Now()})
		case now := <-tick.C:
			kept := pending[:0]
			for _, p := range pending {
				if now.Before(p.due) {
					kept = append(kept, p)
					continue
				}
				m.inspect(p.pid)
				if p.next+1 < len(execInspectDelays) {
					p.next++
					p.due = now.Add(execInspectDelays[p.next])
					kept = append(kept, p)
				}
			}
			pending = kept
		}
	}
}

// exec'ed notes, from the reader, that process pid exec'ed.
func (m *Manager) execed(pid uint32) {
	if pid == m.self || (m.targets != nil && !m.targets[pid]) {
		return
	}
	select {
	case m.execs <- pid:
	default:
		m.stats.ExecsDropped++ // under m.mu (handle)
	}
}

// scan looks at the processes not seen before (the targets only when
// there are targets) and forgets those gone. A process that exec'ed is
// looked at again on its exec event, not here: listing /proc is all a
// scan costs per known process.
func (m *Manager) scan() {
	pids := m.opts.TargetPIDs
	if len(pids) == 0 {
		var err error
		if pids, err = m.opts.Proc.PIDs(); err != nil {
			m.warnOnce("scan", "cannot list processes", err)
			return
		}
	}
	seen := make(map[uint32]bool, len(pids))
	for _, pid := range pids {
		seen[pid] = true
		if pid == m.self {
			continue
		}
		m.mu.Lock()
		known := m.procs[pid]
		m.procs[pid] = true
		m.mu.Unlock()
		if !known {
			m.inspect(pid)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid := range m.procs {
		if !seen[pid] {
			delete(m.procs, pid)
			m.forgetLocked(pid)
		}
	}
}

func (m *Manager) forget(pid uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(pid)
}

func (m *Manager) forgetLocked(pid uint32) {
	m.tracker.Forget(pid)
	_ = m.objs.AllocGoProcs.Delete(pid)
}

// inspect probes what process pid maps: its otel_memory sites and its
// executable's Go hooks.
func (m *Manager) inspect(pid uint32) {
	maps, err := m.opts.Proc.ExecMaps(pid)
	if err != nil {
		return
	}
	if m.usdt {
		m.inspectUSDT(pid, maps)
	}
	if m.opts.Go {
		m.inspectGo(pid, maps)
	}
}

// inspectGo probes the executable of process pid if it is a Go one, and
// tells the programs where the process keeps its labels and rate.
func (m *Manager) inspectGo(pid uint32, maps []procfs.Map) {
	exe, err := m.opts.Proc.Exe(pid)
	if err != nil {
		return
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	var mp procfs.Map
	found := false
	for _, x := range maps {
		if x.Executable() && x.FileBacked() && strings.TrimSuffix(x.Path, " (deleted)") == exe {
			mp, found = x, true
			break
		}
	}
	if !found {
		return
	}
	id := fileID{dev: uint64(mp.DevMajor)<<32 | uint64(mp.DevMinor), inode: mp.Inode}
	m.mu.Lock()
	gf := m.files[id]
	m.mu.Unlock()
	if gf == nil {
		// The file is the process's to choose: open the mapped file
		// itself, within its root, and read and attach through that
		// descriptor. Once per file: what a process needs is kept.
		f, err := procfs.Within(m.deadline, m.opts.Proc.RootPath(pid, exe),
			func() (*os.File, error) { return m.opts.Proc.OpenMappedFile(pid, mp) }, func(f *os.File) { f.Close() })
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				m.warnOnce("open", "cannot open an executable for allocation profiles (logged once)", fmt.Errorf("%s: %w", exe, err))
			}
			return
		}
		gf = m.probeFile(f, exe)
		f.Close()
		m.mu.Lock()
		m.files[id] = gf
		m.mu.Unlock()
	}
	if gf.err != nil {
		return
	}
	proc := bpf.AllocAllocGoProc{G_labels: gf.gLabels, Layout: uint32(gf.layout)}
	if gf.hooks.RateAddr != 0 {
		if bias, ok := Bias(gf.progs, mp.Start, mp.Offset); ok {
			proc.RateAddr = gf.hooks.RateAddr + bias
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.objs.AllocGoProcs.Put(pid, proc); err != nil {
		m.warnOnceLocked("procs", "allocation samples of more Go processes carry no labels or rate", err)
	}
	m.stats.Processes++
}

// probeFile attaches the hooks of executable f; a file that is not Go, or
// whose hooks are not found, is remembered with why.
func (m *Manager) probeFile(f *os.File, exe string) (gf *goFile) {
	gf = &goFile{}
	defer func() {
		if r := recover(); r != nil { // a crafted file (the process's to choose)
			gf = &goFile{err: fmt.Errorf("malformed file: %v", r)}
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		gf.err = err
		return gf
	}
	for _, p := range ef.Progs {
		gf.progs = append(gf.progs, p.ProgHeader)
	}
	if ef.Section(".go.buildinfo") == nil {
		gf.err = ErrNotGo
		return gf
	}
	funcs, err := symbolize.FindFunctions(f, HookNames)
	if err == nil {
		gf.hooks, err = FindHooks(f, ef, funcs)
	}
	if err != nil {
		gf.err = err
		m.mu.Lock()
		m.stats.Refused++
		m.mu.Unlock()
		m.opts.Logger.Warn("Go executable not probed for allocation profiles", zap.String("file", exe), zap.Error(err))
		return gf
	}
	if b, err := golabels.Prepare(f, ef); err == nil {
		gf.gLabels, gf.layout = b.Offsets.GLabels, b.Offsets.Layout
	}
	malloc := m.objs.GoMallocP0
	if gf.hooks.Args == MallocP1 {
		malloc = m.objs.GoMallocP1
	}
	ex, err := link.OpenExecutable(m.opts.Proc.FDPath(f))
	if err == nil {
		for _, h := range []struct {
			name string
			at   uint64
			prog *ebpf.Program
		}{{fnMalloc, gf.hooks.Malloc, malloc}, {fnFreeSpecial, gf.hooks.FreeSpecial, m.objs.GoFreeSpecial}, {fnFree, gf.hooks.Free, m.objs.GoFree},
			{fnCycle, gf.hooks.Cycle, m.objs.GoGcCycle}} {
			var l link.Link
			if l, err = ex.Uprobe(h.name, h.prog, &link.UprobeOptions{Address: h.at}); err != nil {
				err = fmt.Errorf("attach %s at %#x: %w", h.name, h.at, err)
				break
			}
			gf.links = append(gf.links, l)
		}
	}
	if err != nil {
		for _, l := range gf.links {
			_ = l.Close()
		}
		gf.links = nil
		gf.err = err
		m.mu.Lock()
		m.stats.Refused++
		m.mu.Unlock()
		m.opts.Logger.Warn("cannot attach allocation probes", zap.String("file", exe), zap.Error(capabilities.Explain(err, capabilities.SysAdmin)))
		return gf
	}
	m.mu.Lock()
	m.stats.Executables++
	m.mu.Unlock()
	m.opts.Logger.Info("Go allocation profiles", zap.String("file", exe), zap.String("go", gf.hooks.Release))
	return gf
}

// Drain returns the report window's heap profiles and starts the next,
// once the events in the ring buffer are read (the programs wake the
// reader only when a quarter of it is in use).
func (m *Manager) Drain() Window {
	m.flush()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tracker.Drain()
}

// Stats returns counts since Open.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	t := m.tracker
	st.Mallocs, st.Frees, st.UnmatchedFrees, st.Replaced, st.Evicted = t.Mallocs, t.Frees, t.UnmatchedFrees, t.Replaced, t.Evicted
	st.Live = t.Live()
	var counts []bpf.AllocAllocStats
	if err := m.objs.AllocCounts.Lookup(uint32(0), &counts); err == nil {
		for _, c := range counts {
			st.RingbufFull += c.RingbufFull
			st.StackLost += c.StackLost
			st.LabelsLost += c.LabelsLost
			st.USDTArgsLost += c.UsdtArgsLost
		}
	}
	return st
}

func (m *Manager) warnOnce(key, msg string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.warnOnceLocked(key, msg, err)
}

func (m *Manager) warnOnceLocked(key, msg string, err error) {
	if m.warned[key] {
		return
	}
	m.warned[key] = true
	m.opts.Logger.Warn(msg, zap.Error(err))
}

// Close detaches every probe and stops.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	err := errors.Join(m.execLink.Close(), m.reader.Close())
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, gf := range m.files {
		for _, l := range gf.links {
			err = errors.Join(err, l.Close())
		}
	}
	for _, uf := range m.usdtFiles {
		for _, l := range uf.links {
			err = errors.Join(err, l.Close())
		}
	}
	return errors.Join(err, m.objs.Close())
}
