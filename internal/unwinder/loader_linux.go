//go:build linux

package unwinder

import (
	"debug/elf"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// Maps are the sampler's maps the loader fills.
type Maps struct {
	Files *ebpf.Map     // array of maps: slot -> a table, an array of bpf.CpuUnwindRow
	Table *ebpf.MapSpec // what a table is created from (its size set per file)
	// MappedTables says tables are BPF_F_MMAPABLE: their rows are copied
	// in through a mapping of their memory, not written by the kernel.
	MappedTables bool
	Mappings     *ebpf.Map // LPM trie bpf.CpuUnwindMappingKey -> bpf.CpuUnwindMapping
	// Used (nil: not tracked) is per slot of Files non-zero once a walk
	// used its table since the loader last read it (cold tables).
	Used *ebpf.Map
	// Runtimes are the maps the runtimes' walkers read per process, by
	// runtime name (internal/runtimes: Runtime.ProcMap).
	Runtimes map[string]*ebpf.Map
	// Contexts (nil: not read) is where each process's threads keep their
	// OpenTelemetry thread context, and Go processes' threads find their
	// goroutines' pprof labels: pid -> bpf.CpuContextProc.
	Contexts *ebpf.Map
	// ContextPIDs (with Contexts) has a pid's bit set while Contexts holds
	// its entry: samples of other processes skip the lookup.
	ContextPIDs *ebpf.Map
}

// fileKey identifies a mapped file (device and inode, as /proc/<pid>/maps
// shows them).
type fileKey struct {
	devMajor, devMinor uint32
	inode              uint64
}

// fileTable is a file's table, in slot of the array of tables; rows == 0:
// no table (the walk uses frame pointers in its mappings).
type fileTable struct {
	slot, rows uint32
	base       uint64 // the file virtual address of row pc 0
	progs      []elf.ProgHeader
	refs       int          // (process, file) pairs using it
	keys       []fileKey    // the files (device, inode) it serves
	buildID    string       // GNU build id, "" if the file has none
	runtime    *fileRuntime // the interpreter of a runtime in the file, if any
	// jitPC is the file address of the row of its runtime's JIT code
	// (jitrow_linux.go), 0: none; jitRow says the table holds it.
	jitPC     uint64
	jitRow    bool
	building  *pendingBuild     // its build while queued or running (build_linux.go)
	threadCtx *threadctx.Module // the file defines otel_thread_ctx_v1
	goLabels  *golabels.Binary  // the file is a Go executable
	// idleSince is when its last process was forgotten (zero: in use);
	// stamps tell its files from later files with their device and inode.
	idleSince time.Time
	stamps    map[fileKey]fileStamp
	// usedAt is when a walk last used it (as of the last sweep), or when
	// it was built (cold_linux.go).
	usedAt time.Time
}

// loadedProcess is what the loader put in the maps for one process.
type loadedProcess struct {
	start  uint64 // start time, to notice a reused pid
	mapped uint64 // fingerprint of the executable mappings loaded
	keys   []bpf.CpuUnwindMappingKey
	// keyFiles are the files of keys' mappings, one per key (zero: no
	// table); files hold one reference per mapping of a file.
	keyFiles []fileKey
	files    []fileKey
	pid      uint32
	// evicted says a table of the process was evicted: its next rescan
	// loads it again, even with its mappings unchanged.
	evicted bool
	// runtimes are the runtimes whose walker's map has its entry; waiting
	// those not ready for it yet.
	runtimes []*runtimes.Runtime
	versions []string // of runtimes' interpreters, one each ("" when not told)
	waiting  []waitingRuntime
	// threadCtx is the module whose thread context location, threadCtxLoc,
	// is loaded; threadCtxWaiting one whose location is not written yet.
	threadCtx        *threadctx.Module
	threadCtxLoc     threadctx.Location
	threadCtxWaiting *waitingThreadCtx
	// goLabels is the Go executable whose label offsets are loaded, at
	// goBias.
	goLabels *golabels.Binary
	goBias   uint64
	// inPlace is the id of the runtime the process runs whose walker reads
	// frames in place (runtimes.Runtime.InPlace), on each of its entries;
	// 0: none. A process holding two (a JVM embedding node) gets the first.
	inPlace uint32
	// building counts the mappings waiting for their file's table;
	// waitingSince is when the process was first loaded, until none waits
	// (then zero: noteReady).
	building     int
	waitingSince time.Time
}

// anonTable is bpf/unwind.h UNWIND_TABLE_ANON: the table of an anonymous
// executable mapping (JIT code), walked with frame pointers and by the
// process's in-place runtime (bpf/runtimes.h).
const anonTable = 0xfffffffe

// releaseDelay is how long the slot of a removed table stays unused: a
// walk that looked up a mapping just before it was deleted may still look
// up its table (and then finds none, not another file's).
const releaseDelay = time.Second

type pendingRelease struct {
	slot uint32
	at   time.Time
}

// Loader fills the unwind maps from processes' mappings. Safe for
// concurrent use.
type Loader struct {
	maps     Maps
	proc     procfs.FS
	deadline *procfs.Deadline
	build    func(*elf.File) ([]bpf.CpuUnwindRow, uint64, error)

	mu      sync.Mutex
	budget  *tableBudget
	files   map[fileKey]*fileTable
	byBuild map[string]*fileTable // tables by build id: copies of a file share one
	procs   map[uint32]*loadedProcess
	pending []pendingRelease
	stats   Stats
	// noThreadCtx: thread contexts are not read (trace_context::enabled false).
	noThreadCtx bool
	// noGoLabels: goroutine labels are not read (go_labels::enabled false).
	noGoLabels bool
	// goroutines: every Go process's threads' goroutines are read, its
	// labels or not (a Go probe's scope links samples through them).
	goroutines bool
	// runtimeRetry is when the first runtime not ready is due to be asked
	// again (zero: none waits).
	runtimeRetry time.Time
	// buildQueue are the tables to build (RunBuilds), buildingByID those
	// queued or being built by build id; buildWake is signalled when one
	// is queued.
	buildQueue   [lanes][]*pendingBuild
	buildingByID map[string]*pendingBuild
	buildWake    [lanes]chan struct{}
	buildsClosed bool // CloseBuilds was called
	ready        readyWaits
	// unsupportedSeen are the reasons for refused interpreters already
	// taken: each is reported once.
	unsupportedSeen map[string]bool
	// failures keeps the first file of each reason that got no table.
	failures failureNotes
}

// failed counts err, why the file at path got no table, and keeps the
// first of its reason for the log (TakeFailureNotes).
func (l *Loader) failed(err error, path string) {
	l.failures.note(l.stats.countFailure(err), path, err)
}

// TakeFailureNotes returns the first failure of each reason not taken yet,
// as "<path>: <reason>: <error>".
func (l *Loader) TakeFailureNotes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures.take()
}

// NewLoader returns a Loader of maps whose tables hold at most capacity
// rows in all, reading processes through proc.
func NewLoader(maps Maps, proc procfs.FS, capacity uint64) *Loader {
	budget := newTableBudget(maps.Files.MaxEntries(), capacity)
	if maps.MappedTables {
		budget.pageRows = uint64(os.Getpagesize() / RowBytes)
	}
	return &Loader{
		maps:     maps,
		proc:     proc,
		deadline: procfs.NewDeadline(2*time.Second, 4),
		build:    buildRows,
		budget:   budget,
		files:    make(map[fileKey]*fileTable),
		byBuild:  make(map[string]*fileTable),
		procs:    make(map[uint32]*loadedProcess),
		stats:    Stats{RowCapacity: capacity},

		buildingByID: make(map[string]*pendingBuild),
		buildWake:    [lanes]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)},
	}
}

// LoadSoon (re)loads the executable mappings of pid: a map entry per
// mapping, the runtimes, thread context and Go labels its files hold, and
// the tables of the files (built the first time a file is seen) queued
// for RunBuilds. A mapping without a table (no CFI, anonymous JIT code, a
// file that cannot be read, or one whose table is still to build) is
// walked with frame pointers.
func (l *Loader) LoadSoon(pid uint32) error {
	maps, err := l.proc.ExecMaps(pid)
	var start uint64
	if err == nil {
		start, err = l.proc.StartTime(pid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.stats.ProcessErrors++ // most often: the process exited
		return err
	}
	return l.load(pid, start, maps)
}

// Load (re)loads the executable mappings of pid as LoadSoon does, and
// builds the tables of its files before it returns.
func (l *Loader) Load(pid uint32) error {
	err := l.LoadSoon(pid)
	l.RunBuilds()
	return err
}

func (l *Loader) load(pid uint32, start uint64, maps []procfs.Map) error {
	old := l.procs[pid]
	lp := &loadedProcess{start: start, mapped: fingerprint(maps), pid: pid, waitingSince: time.Now()}
	if old != nil && old.start == start {
		lp.waitingSince = old.waitingSince // a reload: counted once, from the first
	}
	l.procs[pid] = lp
	// What was loaded before goes once the new entries are in: entries of
	// unchanged mappings are overwritten in place, their files' tables kept.
	defer func() {
		if old != nil {
			l.drop(old, lp)
		}
		l.stats.Processes = uint64(len(l.procs))
		l.noteReady(lp, time.Now())
	}()
	// The files first: the runtime one of them holds, if its walker reads
	// frames in place, goes on every entry of the process.
	rank := 0
	tables := make([]*fileTable, len(maps))
	tableKeys := make([]fileKey, len(maps))
	for i, m := range maps {
		if m.Executable() && m.FileBacked() {
			t, key := l.table(pid, m, &rank)
			tables[i], tableKeys[i] = t, key
			if t.runtime != nil && t.runtime.rt.InPlace && lp.inPlace == 0 {
				lp.inPlace = uint32(t.runtime.rt.ID)
			}
		}
	}
	engine := jitEngine(tables)
	var engineKey fileKey
	if engine != nil {
		engineKey = tableKeys[slices.Index(tables, engine)]
	}
	// Every entry goes in now, walked with frame pointers where its
	// file's table is still to build: the builds are queued (runBuilds).
	for i, m := range maps {
		if !m.Executable() {
			continue
		}
		value := bpf.CpuUnwindMapping{Table: anonTable, Runtime: lp.inPlace}
		var file fileKey
		var waiting *pendingBuild
		var waitingBias uint64
		if !m.FileBacked() {
			value, file, waiting = l.jitCode(lp, engine, engineKey, m, value)
		}
		if m.FileBacked() {
			value.Table = 0
			t, key := tables[i], tableKeys[i]
			lp.files = append(lp.files, key)
			bias, err := loadBias(t.progs, m.Start, m.Offset)
			switch {
			case t.rows > 0 && err == nil:
				value = bpf.CpuUnwindMapping{Bias: bias + t.base, Table: t.slot, Rows: t.rows, Runtime: lp.inPlace}
				file = key
			case err == nil:
				waiting, waitingBias = t.building, bias
			}
			if t.runtime != nil && err == nil {
				l.addRuntime(lp, t.runtime, bias)
			}
			if t.threadCtx != nil && err == nil {
				l.addThreadCtx(lp, t.threadCtx, bias)
			}
			if t.goLabels != nil {
				goBias := bias
				if err != nil {
					goBias = unknownBias
				}
				l.addGoLabels(lp, t.goLabels, goBias)
			}
			if waiting != nil {
				waiting.waiters = append(waiting.waiters, waiter{lp: lp, first: len(lp.keys), bias: waitingBias, key: key})
				lp.building++
			}
		}
		for _, b := range blocks(m.Start, m.End) {
			key := bpf.CpuUnwindMappingKey{Prefixlen: b.prefixLen(), Pid: pid, Addr: bigEndian(b.addr)}
			if err := l.maps.Mappings.Put(&key, &value); err != nil {
				l.stats.MappingsFull++
				return fmt.Errorf("add mapping of pid %d: %w", pid, err)
			}
			lp.keys = append(lp.keys, key)
			lp.keyFiles = append(lp.keyFiles, file)
		}
		if waiting != nil {
			waiting.waiters[len(waiting.waiters)-1].end = len(lp.keys)
		}
	}
	return nil
}

// Loaded says whether pid's mappings are in the maps and the tables of
// their files built.
func (l *Loader) Loaded(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lp, ok := l.procs[pid]
	return ok && lp.building == 0
}

// Forget removes pid's entries and releases the tables no process maps
// any more.
func (l *Loader) Forget(pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(pid)
	l.stats.Processes = uint64(len(l.procs))
}

// Rescan is RescanSoon, and builds the tables of the files it found
// before it returns.
func (l *Loader) Rescan(pid uint32) (changed bool, err error) {
	changed, err = l.RescanSoon(pid)
	l.RunBuilds()
	return changed, err
}

// RescanSoon reads pid's mappings again and reloads them if its executable
// mappings changed since they were loaded (a library loaded with dlopen,
// new JIT code): the kernel asks for it when a walk of the process finds an
// address in no mapping it knows. A process not loaded yet is loaded. New
// files' tables are queued for RunBuilds.
func (l *Loader) RescanSoon(pid uint32) (changed bool, err error) {
	maps, err := l.proc.ExecMaps(pid)
	var start uint64
	if err == nil {
		start, err = l.proc.StartTime(pid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Rescans++
	if err != nil {
		l.stats.ProcessErrors++
		return false, err
	}
	if lp, ok := l.procs[pid]; ok && lp.start == start && lp.mapped == fingerprint(maps) && !lp.evicted {
		return false, nil
	}
	l.stats.Reloads++
	return true, l.load(pid, start, maps)
}

// evicted says whether a table of pid's was evicted since its mappings
// were loaded: its next rescan reloads them.
func (l *Loader) evicted(pid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lp, ok := l.procs[pid]
	return ok && lp.evicted
}

// countHeldBack counts a rescan not done: the process's previous ones found
// nothing new (rescanBackoffs).
func (l *Loader) countHeldBack() {
	l.mu.Lock()
	l.stats.RescansHeldBack++
	l.mu.Unlock()
}

// countSkipped counts a process that exited before its tables were due to
// load.
func (l *Loader) countSkipped() {
	l.mu.Lock()
	l.stats.SkippedLoads++
	l.mu.Unlock()
}

// Prune forgets the processes that exited (or whose pid was reused): a
// check of every loaded process's start time, for when exit announcements
// were lost (the kernel's ring buffer was full). Exits are otherwise
// announced one by one (Forget).
func (l *Loader) Prune() {
	l.mu.Lock()
	loaded := make(map[uint32]uint64, len(l.procs))
	for pid, lp := range l.procs {
		loaded[pid] = lp.start
	}
	l.mu.Unlock()
	var gone []uint32
	for pid, start := range loaded {
		if now, err := l.proc.StartTime(pid); err != nil || now != start {
			gone = append(gone, pid)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pid := range gone {
		if lp, ok := l.procs[pid]; ok && lp.start == loaded[pid] {
			l.forget(pid)
		}
	}
	l.stats.Prunes++
	l.stats.Processes = uint64(len(l.procs))
}

// Sweep reuses the slots of tables removed long enough ago, and removes
// the tables idle too long. It reads nothing of the processes: its cost
// does not grow with them.
func (l *Loader) Sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	kept := l.pending[:0]
	for _, p := range l.pending {
		if now.Sub(p.at) >= releaseDelay {
			l.budget.releaseSlot(p.slot)
		} else {
			kept = append(kept, p)
		}
	}
	l.pending = kept
	l.expireIdle(now)
	l.markUsed(now)
	l.stats.RowsUsed = l.budget.used
}

// Stats returns the loader's counters.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	tables := map[*fileTable]bool{} // a table serves every copy of its file
	for _, t := range l.files {
		if t.rows > 0 {
			tables[t] = true
		}
	}
	st.Tables = uint64(len(tables))
	for t := range tables {
		if !t.idleSince.IsZero() {
			st.IdleTables++
		}
	}
	st.RowsUsed = l.budget.used
	st.Runtimes = l.runtimeStats(st.Runtimes)
	st.ThreadContexts.Processes = l.threadCtxProcesses()
	st.GoLabels.Processes = l.goLabelProcesses()
	return st
}

func (l *Loader) forget(pid uint32) {
	if lp, ok := l.procs[pid]; ok {
		delete(l.procs, pid)
		l.drop(lp, nil)
	}
}

// drop deletes the entries of lp that kept (the process's entries now, or
// nil) does not have, and releases lp's references to tables.
func (l *Loader) drop(lp, kept *loadedProcess) {
	var keep map[bpf.CpuUnwindMappingKey]bool
	if kept != nil {
		keep = make(map[bpf.CpuUnwindMappingKey]bool, len(kept.keys))
		for _, k := range kept.keys {
			keep[k] = true
		}
	}
	for i := range lp.keys {
		if !keep[lp.keys[i]] {
			_ = l.maps.Mappings.Delete(&lp.keys[i]) // gone already: nothing to do
		}
	}
	l.dropRuntimes(lp, kept)
	if l.maps.Contexts != nil {
		l.dropContext(lp, kept)
	}
	for _, key := range lp.files {
		t := l.files[key]
		if t == nil {
			continue
		}
		if t.refs--; t.refs > 0 {
			continue
		}
		l.retire(t)
	}
}
