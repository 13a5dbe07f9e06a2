//go:build linux

package unwinder

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// A process's files are loaded in two steps: each new file is identified
// at once (opened, its ELF headers read, its runtime, thread context and Go
// labels found: a few reads), which is all the runtimes' walkers need, and
// its table's build queued; RunBuilds builds a queue, the cheapest first
// (queueBuild), each outside the loader's lock. The files with the most
// CFI (node's 2.7 MB, libjvm's 1.5 MB) have a queue of their own, built
// beside the other: a new process on a busy node has its runtime frames
// named before the tables of the processes announced before it are built,
// and the tables of its small files (liblzma's, libpython's) do not wait
// for the large ones.

// pendingBuild is a file identified whose table is not built yet: its
// table (without rows until built), the open file and its ELF headers,
// and the mappings waiting for it.
type pendingBuild struct {
	t       *fileTable
	f       *os.File
	ef      *elf.File
	path    string // as the first process that maps it sees it
	id      string // build id
	large   bool   // built in the large files' queue
	cost    uint64 // its place in its queue, lowest first (buildCost)
	waiters []waiter
}

// largeCFI is the size of CFI (.eh_frame and .debug_frame) from which a
// file's table is built in the large files' queue.
const largeCFI = 1 << 20

// lane is a build queue: the small files' (0) or the large files' (1).
type lane int

const (
	smallFiles lane = iota
	largeFiles
	lanes
)

// cfiSize is the size of f's CFI sections.
func cfiSize(f *elf.File) uint64 {
	var n uint64
	for _, s := range f.Sections {
		if s.Name == ".eh_frame" || s.Name == ".debug_frame" {
			n += s.Size
		}
	}
	return n
}

// waiter is a mapping whose file's table is being built: its process's
// entries lp.keys[first:end] get the table once built (while lp is still
// the process's load).
type waiter struct {
	lp         *loadedProcess
	first, end int
	bias       uint64
	key        fileKey
	// jit is the range of a mapping of the file's runtime's JIT code
	// (jitrow_linux.go); zero for a mapping of the file.
	jit [2]uint64
}

// table returns the table of the file of m, with a reference taken for the
// caller: the one of this file (device and inode), else the one of a copy
// of it (same build id, e.g. the same library in two container images),
// else one identified now, whose build is queued. A file that cannot be
// read gets an empty table (counted), so it is not tried again while
// mapped; but a mapping gone from its process (procfs.ErrMappingGone: a
// short-lived process exited before its files were opened) says nothing of
// its file, which gets an empty table of that process's only (the zero
// key, which no file has): the next process mapping it opens it.
func (l *Loader) table(pid uint32, m procfs.Map, rank *int) (*fileTable, fileKey) {
	key := fileKey{m.DevMajor, m.DevMinor, m.Inode}
	t, ok := l.files[key]
	if ok && !t.idleSince.IsZero() && !l.revive(pid, m, key, t) {
		ok = false // another file has its device and inode now
	}
	if !ok {
		var err error
		var stamp fileStamp
		t, stamp, err = l.identify(pid, m, rank)
		if errors.Is(err, procfs.ErrMappingGone) {
			return &fileTable{}, fileKey{}
		}
		if err != nil {
			l.failed(err, m.Path)
		}
		if t == nil {
			t = &fileTable{}
		}
		if !t.idleSince.IsZero() { // an idle copy with the same build id
			t.idleSince, t.usedAt = time.Time{}, time.Now() // in use again: not cold
			l.stats.IdleReused++
		}
		t.keys = append(t.keys, key)
		if stamp != (fileStamp{}) {
			if t.stamps == nil {
				t.stamps = map[fileKey]fileStamp{}
			}
			t.stamps[key] = stamp
		}
		l.files[key] = t
	}
	t.refs++
	return t, key
}

// identify opens the file of m and finds what it holds, queueing its
// table's build, or returns the table of a file with the same build id
// (built or being built).
func (l *Loader) identify(pid uint32, m procfs.Map, rank *int) (*fileTable, fileStamp, error) {
	name := l.proc.RootPath(pid, strings.TrimSuffix(m.Path, " (deleted)"))
	f, err := procfs.Within(l.deadline, name, func() (*os.File, error) { return l.proc.OpenMappedFile(pid, m) },
		func(f *os.File) { f.Close() })
	if err != nil {
		return nil, fileStamp{}, &Failure{Reason: capture.TableOpenFailed, Err: err}
	}
	stamp, _ := stampOf(f)
	var ef *elf.File
	var id string
	if err := noPanic(func() (err error) {
		if ef, err = elf.NewFile(f); err == nil {
			id = buildID(ef)
		}
		return err
	}); err != nil {
		f.Close()
		return nil, stamp, &Failure{Reason: capture.TableMalformed, Err: err}
	}
	if t := l.byBuild[id]; id != "" && t != nil {
		f.Close()
		return t, stamp, nil
	}
	if pb := l.buildingByID[id]; id != "" && pb != nil {
		f.Close()
		return pb.t, stamp, nil
	}
	// Until its rows are built (or without them) the file is walked with
	// frame pointers, and its interpreter, thread context and Go labels,
	// if any, are read already.
	t := &fileTable{progs: progHeaders(ef), runtime: l.detectRuntime(ef), threadCtx: l.detectThreadCtx(ef), goLabels: l.detectGoLabels(f, ef)}
	if t.runtime != nil && t.runtime.rt.JITFrame != nil && t.runtime.rt.EntryCode != nil {
		t.jitPC = jitRowPC(t.progs)
	}
	size := cfiSize(ef)
	pb := &pendingBuild{t: t, f: f, ef: ef, path: m.Path, id: id, large: size >= largeCFI, cost: buildCost(size, *rank)}
	*rank++
	t.building = pb
	if id != "" {
		l.buildingByID[id] = pb
	}
	l.queueBuild(pb)
	return t, stamp, nil
}

// buildCost orders a lane's queue: a file's CFI size, times one more than
// the files of its process queued before it (rank: its executable 0, then
// its libraries in the order of its mappings). Small tables first, as each
// costs little and may be all a process still waits for (shortest job
// first: the least mean wait), and a process's first files before its
// later ones of the same size. A runtime's walker needs no table to name
// its frames: the files holding one wait their turn. In a mix of processes
// started together, xz's liblzma (18 KB of CFI, its third file) waited
// 1.3 s behind three CPythons' libraries (320 to 410 KB, first or second)
// when queued by rank alone.
func buildCost(cfiSize uint64, rank int) uint64 {
	return cfiSize * (uint64(rank) + 1)
}

// queueBuild queues pb in its lane by cost (buildCost), those of the same
// cost in the order queued. A file waits only for cheaper ones queued after
// it, which a finite set of new files bounds (those of the same build are
// queued once).
func (l *Loader) queueBuild(pb *pendingBuild) {
	if l.buildsClosed { // no table: walked with frame pointers
		pb.f.Close()
		pb.t.building = nil
		delete(l.buildingByID, pb.id)
		return
	}
	ln := smallFiles
	if pb.large {
		ln = largeFiles
	}
	q := l.buildQueue[ln]
	at := len(q)
	for at > 0 && pb.cost < q[at-1].cost {
		at--
	}
	l.buildQueue[ln] = slices.Insert(q, at, pb)
	select {
	case l.buildWake[ln] <- struct{}{}:
	default:
	}
}

// RunBuilds builds the queued tables of both lanes; it returns once they
// are empty.
func (l *Loader) RunBuilds() {
	for ln := range lanes {
		l.runBuilds(ln)
	}
}

// runBuilds builds the tables queued in lane ln, each outside the loader's
// lock, and gives each to the mappings waiting for it; it returns once the
// queue is empty.
func (l *Loader) runBuilds(ln lane) {
	for {
		l.mu.Lock()
		if len(l.buildQueue[ln]) == 0 || l.buildsClosed {
			l.mu.Unlock()
			return
		}
		pb := l.buildQueue[ln][0]
		l.buildQueue[ln] = l.buildQueue[ln][1:]
		l.mu.Unlock()

		began := time.Now()
		var rows []bpf.CpuUnwindRow
		var base uint64
		var jitErr error
		jitRow := false
		err := noPanic(func() (err error) {
			if ln == largeFiles {
				// A file of millions of rows (ClickHouse, Chromium) takes
				// several times their size while it is built: collected
				// sooner, the collector's peak stays near what is live.
				defer lowerGCPercent(largeBuildGCPercent)()
			}
			rows, base, err = l.build(pb.ef)
			if err == nil && len(rows) > 0 && pb.t.jitPC != 0 {
				rows, jitErr = withJITRow(pb.ef, pb.t.runtime, rows, base, pb.t.jitPC)
				jitRow = jitErr == nil
			}
			return err
		})
		pb.f.Close()

		l.mu.Lock()
		l.stats.BuildTime += time.Since(began)
		switch {
		case errors.Is(err, cfi.ErrTooManyRows):
			err = &Failure{Reason: capture.TableTooLarge, Err: err}
		case err != nil:
			err = &Failure{Reason: capture.TableMalformed, Err: err}
		default:
			err = l.install(pb, rows, base, jitRow)
			if err == nil && jitErr != nil {
				err = &Failure{Reason: capture.TableNoJITRow, Err: jitErr}
			}
		}
		if err != nil {
			l.failed(err, pb.path)
		}
		now := time.Now()
		for _, w := range pb.waiters {
			if w.lp.building--; l.procs[w.lp.pid] == w.lp {
				l.noteReady(w.lp, now)
			}
		}
		pb.t.building = nil
		if l.buildingByID[pb.id] == pb {
			delete(l.buildingByID, pb.id)
		}
		l.mu.Unlock()
		if len(rows) >= returnMemoryRows {
			// Building it took several times its size in garbage (node:
			// 70 MiB for 372k rows): give it back to the system now,
			// before the next table's build adds to it.
			rows = nil
			debug.FreeOSMemory()
		}
	}
}

// CloseBuilds ends the builds: a build running finishes, the files of
// those still queued are closed and none is built after (the loader is
// being closed).
func (l *Loader) CloseBuilds() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buildsClosed = true
	for ln, q := range l.buildQueue {
		for _, pb := range q {
			pb.f.Close()
		}
		l.buildQueue[ln] = nil
	}
}

// install writes the table of rows built for pb, and points the mappings
// waiting for it at it. A file no process maps any more gets none; one
// without CFI keeps none (walked with frame pointers), and so does one
// whose table fails (the error says why).
func (l *Loader) install(pb *pendingBuild, rows []bpf.CpuUnwindRow, base uint64, jitRow bool) error {
	t := pb.t
	if t.refs == 0 {
		return nil // forgotten while it was built
	}
	if len(rows) == 0 {
		l.stats.NoCFI++
		t.buildID = pb.id
		l.shareByBuildID(t)
		return nil
	}
	if len(rows) > maxSearchRows {
		return &Failure{Reason: capture.TableTooLarge, Err: fmt.Errorf("%d rows, more than the %d a table's search covers", len(rows), maxSearchRows)}
	}
	slot, ok := l.allocEvicting(uint32(len(rows)))
	if !ok {
		return &Failure{Reason: capture.TableSpaceFull,
			Err: fmt.Errorf("%d rows (%.1f MiB) do not fit unwinding::table_memory_mib (%.1f of %.1f MiB in use): raise it",
				len(rows), mib(uint64(len(rows))), mib(l.budget.used), mib(l.budget.capacity))}
	}
	if err := l.addTable(slot, rows); err != nil {
		l.budget.releaseRows(uint32(len(rows)))
		l.budget.releaseSlot(slot)
		return &Failure{Reason: capture.TableMapFailed, Err: err}
	}
	t.base, t.slot, t.rows, t.usedAt, t.buildID, t.jitRow = base, slot, uint32(len(rows)), time.Now(), pb.id, jitRow
	l.shareByBuildID(t)
	for _, w := range pb.waiters {
		if l.procs[w.lp.pid] != w.lp {
			continue // loaded again, or forgotten
		}
		if w.jit != [2]uint64{} && (!t.jitRow || !jitFits(t, w.jit[0], w.jit[1])) {
			continue // JIT code walked with frame pointers, as loaded
		}
		value := bpf.CpuUnwindMapping{Bias: w.bias + t.base, Table: t.slot, Rows: t.rows, Runtime: w.lp.inPlace}
		for i := w.first; i < w.end; i++ {
			if err := l.maps.Mappings.Put(&w.lp.keys[i], &value); err != nil {
				l.stats.MappingsFull++
				break
			}
			w.lp.keyFiles[i] = w.key
		}
	}
	return nil
}

// largeBuildGCPercent is the GOGC of the large files' builds.
const largeBuildGCPercent = 25

// lowerGCPercent lowers GOGC to percent, unless it is lower already, and
// returns what sets it back.
func lowerGCPercent(percent int) (restore func()) {
	old := debug.SetGCPercent(percent)
	if old >= 0 && old < percent {
		debug.SetGCPercent(old)
	}
	return func() { debug.SetGCPercent(old) }
}

// returnMemoryRows is the size of a table from which its build's garbage
// is returned to the system at once.
const returnMemoryRows = 64 << 10

// shareByBuildID offers t to the copies of its file.
func (l *Loader) shareByBuildID(t *fileTable) {
	if t.buildID != "" {
		l.byBuild[t.buildID] = t
	}
}
