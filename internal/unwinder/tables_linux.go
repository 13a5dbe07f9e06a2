//go:build linux

package unwinder

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
)

// DefaultTableMemory is the default budget of the unwind tables' kernel
// memory (RowBytes a row). Tables measured (rows): libLLVM 14 949k, node 20
// 372k, libjvm (Temurin 25) 231k, (OpenJDK 17) 191k, libpython 3.x ~60k,
// libc 28k, xz 1.2k: a node's dozens of distinct images fit.
const DefaultTableMemory = 64 << 20

// maxTables is the slots of the array of tables: files with a table at
// once, each shared by every process mapping it (or a copy of it).
const maxTables = 16 << 10

// maxMappingEntries bounds the LPM trie of process mappings (an executable
// mapping takes a few to a few dozen entries).
const maxMappingEntries = 128 << 10

// sweepInterval is how often rows released by exited processes are reused.
const sweepInterval = 5 * time.Second

// Tables are the unwind tables every stack-walking BPF program of the
// receiver shares (the CPU sampler, the off-CPU tracer): the kernel maps
// (rows, mappings, CPython processes), given to each program's collection
// in place of its own (Prepare),
// the Loader that fills them from the processes the programs announce
// (Follow), and its periodic sweep. Safe for concurrent use.
type Tables struct {
	maps   Maps
	loader *Loader
	stop   chan struct{}
	done   chan struct{}
	prune  chan struct{} // a Prune is due: announcements were lost
	built  chan struct{} // each buildTables sends one when it returns

	mu       sync.Mutex
	reported capture.TableFailures // failures already handed to a source's stats
	// reportedContext: context failures already handed to a source's stats.
	reportedContext capture.ContextFailures
	// reportedPythonUnsupported: likewise, refused CPython interpreters.
	reportedPythonUnsupported uint64
}

// OpenTables creates the kernel maps, the tables in them kept within
// memory bytes (0: DefaultTableMemory), and starts the sweep; proc reads the
// processes' mappings.
func OpenTables(proc procfs.FS, memory uint64) (*Tables, error) {
	memory = cmp.Or(memory, DefaultTableMemory)
	spec, err := bpf.LoadCpu()
	if err != nil {
		return nil, fmt.Errorf("load unwind maps spec: %w", err)
	}
	fs := spec.Maps[bpf.CpuMapUnwindFiles].Copy()
	fs.MaxEntries = maxTables
	if fs.InnerMap == nil {
		return nil, fmt.Errorf("unwind map %s has no inner map", bpf.CpuMapUnwindFiles)
	}
	ms := spec.Maps[bpf.CpuMapUnwindMappings].Copy()
	ms.MaxEntries = maxMappingEntries
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK.
	_ = memlock.Raise()
	maps := Maps{Table: fs.InnerMap}
	var created []*ebpf.Map
	create := func(spec *ebpf.MapSpec, what string) (*ebpf.Map, error) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			for _, c := range created {
				_ = c.Close()
			}
			return nil, fmt.Errorf("create %s map: %w", what, memlock.Explain(err))
		}
		created = append(created, m)
		return m, nil
	}
	us := spec.Maps[bpf.CpuMapUnwindTableUsed].Copy()
	us.MaxEntries = maxTables
	// BPF_F_INNER_MAP (tables of any size) came with Linux 5.10. Tables
	// are mappable where the kernel takes it (rows copied in, not
	// updated: a table's install cost as much as its build), else written
	// by updates.
	fs.InnerMap.Flags |= unix.BPF_F_MMAPABLE
	if maps.Files, err = ebpf.NewMap(fs); err == nil {
		maps.MappedTables = true
		created = append(created, maps.Files)
	} else {
		fs.InnerMap.Flags &^= unix.BPF_F_MMAPABLE
		if maps.Files, err = create(fs, "unwind tables"); err != nil {
			return nil, err
		}
	}
	if maps.Mappings, err = create(ms, "unwind mappings"); err != nil {
		return nil, err
	}
	if maps.Used, err = create(us, "unwind table use"); err != nil {
		return nil, err
	}
	if maps.Contexts, err = create(spec.Maps[bpf.CpuMapContextProcs].Copy(), "context processes"); err != nil {
		return nil, err
	}
	cp := spec.Maps[bpf.CpuMapContextPids].Copy()
	cp.MaxEntries = contextPIDWords("/proc/sys/kernel/pid_max", cp.MaxEntries)
	if maps.ContextPIDs, err = create(cp, "context pids"); err != nil {
		return nil, err
	}
	if maps.Runtimes, err = newRuntimeMaps(spec); err != nil {
		for _, c := range created {
			_ = c.Close()
		}
		return nil, err
	}
	t := &Tables{maps: maps, loader: NewLoader(maps, proc, memory/RowBytes), stop: make(chan struct{}), done: make(chan struct{}), prune: make(chan struct{}, 1),
		built: make(chan struct{}, lanes)}
	go t.sweep()
	for ln := range lanes {
		go t.buildTables(ln)
	}
	return t, nil
}

// newRuntimeMaps creates the map each runtime's walker reads per process,
// as the collection spec (the CPU sampler's) declares it.
func newRuntimeMaps(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	for _, rt := range all.Runtimes {
		ms, ok := spec.Maps[rt.ProcMap]
		if !ok {
			continue
		}
		m, err := ebpf.NewMap(ms.Copy())
		if err != nil {
			for _, m := range out {
				_ = m.Close()
			}
			return nil, fmt.Errorf("create %s processes map: %w", rt.Name, memlock.Explain(err))
		}
		out[rt.Name] = m
	}
	return out, nil
}

// buildTables builds the tables the loader queues in lane ln, one at a
// time, until the tables are closed.
func (t *Tables) buildTables(ln lane) {
	defer func() { t.built <- struct{}{} }()
	for {
		select {
		case <-t.stop:
			return
		case <-t.loader.buildWake[ln]:
			t.loader.runBuilds(ln)
		}
	}
}

func (t *Tables) sweep() {
	defer close(t.done)
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	retry := time.NewTicker(runtimeRetryFirst)
	defer retry.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-retry.C:
			t.loader.retryRuntimes()
		case <-tick.C:
			t.loader.Sweep()
			if t.maps.Contexts != nil {
				t.loader.retryThreadCtx()
			}
		case <-t.prune:
			t.loader.Prune()
		}
	}
}

// Close stops the sweep and closes the maps (programs that share them keep
// their own references).
func (t *Tables) Close() error {
	close(t.stop)
	<-t.done
	t.loader.CloseBuilds() // a build running finishes, no other starts
	for range lanes {
		<-t.built
	}
	errs := []error{t.maps.Files.Close(), t.maps.Mappings.Close(), t.maps.Used.Close()}
	for _, m := range t.maps.Runtimes {
		errs = append(errs, m.Close())
	}
	if t.maps.Contexts != nil {
		errs = append(errs, t.maps.Contexts.Close(), t.maps.ContextPIDs.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the loader's counters.
func (t *Tables) Stats() Stats { return t.loader.Stats() }

// IgnoreThreadContexts stops locating the OpenTelemetry thread contexts of
// processes loaded from now on (trace_context::enabled false).
func (t *Tables) IgnoreThreadContexts() { t.loader.ignoreThreadCtx() }

// IgnoreGoLabels stops locating the goroutine labels of Go processes
// loaded from now on (go_labels::enabled false).
func (t *Tables) IgnoreGoLabels() { t.loader.ignoreGoLabels() }

// ReadGoroutines makes the samplers find the goroutine each thread of a Go
// process loaded from now on runs, whether its labels are read or not:
// samples link to a Go probe's scopes through it (internal/scopemap).
func (t *Tables) ReadGoroutines() { t.loader.readGoroutines() }

// Loaded says whether pid's tables are loaded: until then its stacks are
// walked with frame pointers.
func (t *Tables) Loaded(pid uint32) bool { return t.loader.Loaded(pid) }

// Prepare readies spec, a collection that includes bpf/unwind.h, to load:
// it tells the program whether the kernel has bpf_task_pt_regs and, when
// tables is not nil, that announced processes get tables, and returns the
// options that make it share tables' maps.
// With nil tables the program keeps its own empty maps, so it walks every
// stack with frame pointers.
func Prepare(spec *ebpf.CollectionSpec, tables *Tables) (*ebpf.CollectionOptions, error) {
	if err := spec.Variables["have_task_pt_regs"].Set(haveTaskPtRegs()); err != nil {
		return nil, fmt.Errorf("set have_task_pt_regs: %w", err)
	}
	if tables == nil {
		return nil, nil
	}
	// Announced processes get tables: an address in none of their mappings
	// asks for a rescan (bpf/announce.h).
	if v, ok := spec.Variables["unwind_tables"]; ok {
		if err := v.Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("set unwind_tables: %w", err)
		}
	}
	repl := map[string]*ebpf.Map{bpf.CpuMapUnwindFiles: tables.maps.Files, bpf.CpuMapUnwindMappings: tables.maps.Mappings,
		bpf.CpuMapUnwindTableUsed: tables.maps.Used}
	for name, m := range repl {
		ms, ok := spec.Maps[name]
		if !ok {
			return nil, fmt.Errorf("BPF collection has no map %s", name)
		}
		ms.MaxEntries = m.MaxEntries()
	}
	// Collections with a runtime's walker share its map too, and those
	// that read thread contexts their map.
	for _, rt := range all.Runtimes {
		if _, ok := spec.Maps[rt.ProcMap]; ok && tables.maps.Runtimes[rt.Name] != nil {
			repl[rt.ProcMap] = tables.maps.Runtimes[rt.Name]
		}
	}
	if _, ok := spec.Maps[bpf.CpuMapContextProcs]; ok && tables.maps.Contexts != nil {
		repl[bpf.CpuMapContextProcs] = tables.maps.Contexts
		ms, ok := spec.Maps[bpf.CpuMapContextPids]
		if !ok {
			return nil, fmt.Errorf("BPF collection has no map %s", bpf.CpuMapContextPids)
		}
		ms.MaxEntries = tables.maps.ContextPIDs.MaxEntries()
		repl[bpf.CpuMapContextPids] = tables.maps.ContextPIDs
	}
	return &ebpf.CollectionOptions{MapReplacements: repl}, nil
}

// haveTaskPtRegs says whether the kernel has bpf_task_pt_regs (Linux 5.15;
// see have_task_pt_regs in bpf/unwind.h). It came to every tracing program
// type at once, so the perf_event probe answers for tp_btf programs too.
func haveTaskPtRegs() uint8 {
	if features.HaveProgramHelper(ebpf.PerfEvent, asm.FnTaskPtRegs) == nil {
		return 1
	}
	return 0
}

// Follower loads the tables of each process one source announces, off its
// sampling path, once it has lived loadDelay, and hands the announcement
// on at once. Until its tables are loaded a process's stacks are walked
// with frame pointers.
type Follower struct {
	tables   *Tables
	events   chan capture.ProcessEvent
	drops    atomic.Uint64 // announcements the reader of Events had no room for
	done     chan struct{}
	deferred deferredLoads  // the run goroutine's
	backoffs rescanBackoffs // the run goroutine's
}

// Follow starts following in; it ends when in is closed, and then closes
// Events.
func (t *Tables) Follow(in <-chan capture.ProcessEvent) *Follower {
	f := &Follower{tables: t, events: make(chan capture.ProcessEvent, stackdrain.NewProcessesBuffer), done: make(chan struct{}),
		backoffs: rescanBackoffs{}}
	go f.run(in)
	return f
}

func (f *Follower) run(in <-chan capture.ProcessEvent) {
	defer close(f.done)
	defer close(f.events)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			f.handle(ev, time.Now())
			select {
			case f.events <- ev:
			default:
				f.drops.Add(1)
			}
		case now := <-timer.C:
			for _, pid := range f.deferred.take(now) {
				_ = f.tables.loader.LoadSoon(pid) // counted in the loader's stats
			}
		}
		if at, ok := f.deferred.next(); ok {
			timer.Reset(time.Until(at))
		}
	}
}

func (f *Follower) handle(ev capture.ProcessEvent, now time.Time) {
	switch {
	case ev.Exec, ev.Exit:
		if f.deferred.cancel(ev.PID) {
			f.tables.loader.countSkipped()
		}
		// An exec'ed program is announced at its first sample.
		f.tables.loader.Forget(ev.PID)
		f.backoffs.forget(ev.PID)
	case ev.Rescan:
		f.deferred.cancel(ev.PID)
		if !f.backoffs.due(ev.PID, now) && !f.tables.loader.evicted(ev.PID) {
			f.tables.loader.countHeldBack()
			return
		}
		changed, err := f.tables.loader.RescanSoon(ev.PID) // counted in the loader's stats
		f.backoffs.done(ev.PID, now, changed || err != nil)
	default:
		if !f.deferred.add(ev.PID, now) {
			_ = f.tables.loader.LoadSoon(ev.PID)
		}
	}
}

// Events are the announcements followed, once their tables are loaded.
func (f *Follower) Events() <-chan capture.ProcessEvent { return f.events }

// Wait returns once the announcements are closed and handled.
func (f *Follower) Wait() { <-f.done }

// AddStats adds to st the announcements dropped since the previous call,
// the tables' gauges, and the files left without a table and the waits for
// tables since any source's previous call (each handed to one source
// only).
func (f *Follower) AddStats(st *capture.Stats) {
	st.NewProcessDrops += f.drops.Swap(0)
	if st.NewProcessDrops > 0 {
		// An exit may be among the announcements lost: check every
		// process once, off the caller's path.
		select {
		case f.tables.prune <- struct{}{}:
		default:
		}
	}
	st.TablesReady = append(st.TablesReady, f.tables.loader.takeReadyWaits()...)
	ls := f.tables.loader.Stats()
	st.UnwindTables = ls.Tables
	st.UnwindTableBytes = ls.RowsUsed * RowBytes
	st.PythonProcesses = ls.Runtimes[capture.CPython.Name()].Processes
	st.PythonVersions = ls.Runtimes[capture.CPython.Name()].Versions
	st.JVMProcesses = ls.Runtimes[capture.HotSpot.Name()].Processes
	st.V8Processes = ls.Runtimes[capture.V8.Name()].Processes
	st.RubyProcesses = ls.Runtimes[capture.Ruby.Name()].Processes
	st.PHPProcesses = ls.Runtimes[capture.PHP.Name()].Processes
	st.ThreadContextProcesses = ls.ThreadContexts.Processes
	st.GoLabelProcesses = ls.GoLabels.Processes
	t := f.tables
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, n := range ls.Failed {
		st.TableFailures[i] += n - t.reported[i]
	}
	t.reported = ls.Failed
	now := capture.ContextFailures{
		ThreadContextUnresolved: ls.ThreadContexts.Unresolved, ThreadContextFailed: ls.ThreadContexts.Failed,
		GoLabelsUnsupported: ls.GoLabels.Unsupported, GoLabelsFailed: ls.GoLabels.Failed, GoLabelsNoLabels: ls.GoLabels.NoLabels,
	}
	st.ContextFailures = st.ContextFailures.Add(now.Sub(t.reportedContext))
	t.reportedContext = now
	py := ls.Runtimes[capture.CPython.Name()].Unsupported
	st.PythonUnsupported += py - t.reportedPythonUnsupported
	t.reportedPythonUnsupported = py
	st.PythonUnsupportedErrors = append(st.PythonUnsupportedErrors, t.loader.takeUnsupportedErrors(capture.CPython.Name())...)
	st.TableFailureNotes = append(st.TableFailureNotes, t.loader.TakeFailureNotes()...)
}
