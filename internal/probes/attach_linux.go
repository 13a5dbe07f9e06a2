//go:build linux

package probes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// fileID identifies a file independently of the path a process sees it by.
type fileID struct {
	dev   uint64 // major<<32 | minor
	inode uint64
}

type attempt struct {
	file  fileID
	probe int
}

// attacher finds files matching the probes in processes' maps and attaches
// uprobes to them, once per (file, probe).
type attacher struct {
	proc        procfs.FS
	log         *zap.Logger
	specs       []compiledSpec
	entry, exit *ebpf.Program

	// deadline bounds the opens of probed files: on FUSE or a dead
	// network file system an open can block forever.
	deadline *procfs.Deadline

	mu      sync.Mutex
	done    map[attempt]bool // attach attempted with the file readable
	links   map[fileID][]link.Link
	missing int
	refused int
	closed  bool
}

func newAttacher(proc procfs.FS, log *zap.Logger, specs []compiledSpec, entry, exit *ebpf.Program) *attacher {
	return &attacher{
		proc: proc, log: log, specs: specs, entry: entry, exit: exit,
		deadline: procfs.NewDeadline(openTimeout, maxStuckOpens),
		done:     make(map[attempt]bool),
		links:    make(map[fileID][]link.Link),
	}
}

// Times after an exec at which the process's maps are scanned: the
// executable is mapped at exec, libraries shortly after by the dynamic loader.
var execScanDelays = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

// Bounds on opening probed files (see attacher.deadline).
const (
	openTimeout   = 2 * time.Second
	maxStuckOpens = 16
)

type pendingScan struct {
	pid  uint32
	due  time.Time
	next int // index into execScanDelays of the following scan
}

// follow scans processes announced on execs (several times, see
// execScanDelays) and every process each rescan interval, until stop closes.
func (a *attacher) follow(stop <-chan struct{}, execs <-chan uint32, rescan time.Duration) {
	var pending []pendingScan
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var rescanC <-chan time.Time
	if rescan > 0 {
		t := time.NewTicker(rescan)
		defer t.Stop()
		rescanC = t.C
	}
	for {
		select {
		case <-stop:
			return
		case pid, ok := <-execs:
			if !ok {
				execs = nil
				continue
			}
			a.scanPID(pid)
			pending = append(pending, pendingScan{pid: pid, due: time.Now().Add(execScanDelays[1]), next: 2})
		case <-tick.C:
			now := time.Now()
			kept := pending[:0]
			for _, p := range pending {
				if now.Before(p.due) {
					kept = append(kept, p)
					continue
				}
				if !a.scanPID(p.pid) || p.next >= len(execScanDelays) {
					continue // gone, or done
				}
				p.due = now.Add(execScanDelays[p.next] - execScanDelays[p.next-1])
				p.next++
				kept = append(kept, p)
			}
			pending = kept
		case <-rescanC:
			a.scanAll()
		}
	}
}

// scanAll scans every process.
func (a *attacher) scanAll() {
	pids, err := a.proc.PIDs()
	if err != nil {
		a.log.Warn("cannot list processes for probes", zap.Error(err))
		return
	}
	for _, pid := range pids {
		a.scanPID(pid)
	}
}

// scanPID attaches the probes to the files pid maps that match them. It
// reports false when the process is gone.
func (a *attacher) scanPID(pid uint32) bool {
	maps, err := a.proc.Maps(pid)
	if err != nil {
		return false
	}
	type candidate struct {
		m      procfs.Map
		probes []int
	}
	var cands []candidate
	a.mu.Lock()
	seen := make(map[fileID]bool)
	for _, m := range maps {
		if !m.Executable() || !m.FileBacked() {
			continue
		}
		id := fileID{dev: uint64(m.DevMajor)<<32 | uint64(m.DevMinor), inode: m.Inode}
		if seen[id] {
			continue
		}
		seen[id] = true
		path := strings.TrimSuffix(m.Path, " (deleted)")
		var probes []int
		for i, s := range a.specs {
			if !a.done[attempt{id, i}] && s.file.MatchString(path) {
				probes = append(probes, i)
			}
		}
		if len(probes) > 0 {
			cands = append(cands, candidate{m, probes})
		}
	}
	a.mu.Unlock()
	for _, c := range cands {
		a.attachFile(pid, c.m, c.probes)
	}
	return true
}

// attachFile resolves the symbols of probes in the file of mapping m and
// attaches them.
func (a *attacher) attachFile(pid uint32, m procfs.Map, probes []int) {
	id := fileID{dev: uint64(m.DevMajor)<<32 | uint64(m.DevMinor), inode: m.Inode}
	// The file is the process's to choose: open the mapped file itself
	// (procfs.OpenMappedFile: inside the process's root, same device and
	// inode, a regular local file), read its symbols from that descriptor
	// and attach through it (procfs.FDPath), never by a path the process
	// could point elsewhere between the read and the attach.
	name := a.proc.RootPath(pid, strings.TrimSuffix(m.Path, " (deleted)"))
	f, err := procfs.Within(a.deadline, name, func() (*os.File, error) { return a.proc.OpenMappedFile(pid, m) },
		func(f *os.File) { f.Close() })
	queries := make([]symbolQuery, 0, 2*len(probes))
	for _, i := range probes {
		queries = append(queries, a.specs[i].entry)
		if !a.specs[i].Return {
			queries = append(queries, a.specs[i].exit)
		}
	}
	var funcs symbolize.ELFFunctions
	if err == nil {
		defer f.Close()
		funcs, err = symbolize.FindFunctions(f, func(sym string) bool {
			return slices.ContainsFunc(queries, func(q symbolQuery) bool { return q.match(sym) })
		})
	}
	if errors.Is(err, fs.ErrNotExist) && procfs.RefusalReason(err) == "" {
		return // the process is gone; another scan retries
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, i := range probes {
		key := attempt{id, i}
		if a.done[key] {
			continue // attached by a concurrent scan
		}
		a.done[key] = true
		s := a.specs[i]
		log := a.log.With(zap.String("probe", s.ID), zap.String("file", m.Path), zap.Uint32("pid", pid))
		if err != nil {
			log.Warn("cannot read symbols of probed file", zap.String("reason", procfs.RefusalReason(err)), zap.Error(err))
			continue
		}
		if s.Return && funcs.Go {
			a.refused++
			log.Warn("probe not attached: symbol mode (uretprobe) is refused on Go binaries because Go moves stacks; use entry_symbol and exit_symbol")
			continue
		}
		entry := offsets(funcs.Symbols, s.entry)
		exit := entry
		if !s.Return {
			exit = offsets(funcs.Symbols, s.exit)
		}
		if len(entry) == 0 || len(exit) == 0 {
			missing := s.EntrySymbol
			if len(entry) > 0 {
				missing = s.ExitSymbol
			}
			a.missing++
			log.Warn("probe not attached: symbol not found in file", zap.String("symbol", missing))
			continue
		}
		links, err := a.attach(a.proc.FDPath(f), i, entry, exit)
		if err != nil {
			log.Warn("cannot attach probe", zap.Error(err))
			continue
		}
		a.links[id] = append(a.links[id], links...)
		log.Debug("probe attached", zap.Int("uprobes", len(links)))
	}
}

type symOffset struct {
	name   string
	offset uint64
}

// offsets returns the distinct offsets of the symbols q matches (aliases such
// as C1/C2 constructors share one offset: one uprobe).
func offsets(syms []symbolize.FunctionSymbol, q symbolQuery) []symOffset {
	var out []symOffset
	for _, s := range syms {
		if q.match(s.Name) && (len(out) == 0 || out[len(out)-1].offset != s.Offset) {
			out = append(out, symOffset{s.Name, s.Offset})
		}
	}
	return out
}

// attach places the exit side first, so a scope entered while attaching
// is never left open; on error nothing stays attached.
func (a *attacher) attach(path string, probe int, entry, exit []symOffset) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			_ = l.Close()
		}
		return nil, err
	}
	for _, o := range exit {
		opts := &link.UprobeOptions{Address: o.offset, Cookie: uint64(probe)}
		var l link.Link
		if a.specs[probe].Return {
			l, err = ex.Uretprobe(o.name, a.exit, opts)
		} else {
			l, err = ex.Uprobe(o.name, a.exit, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("attach exit %s at %#x: %w", o.name, o.offset, err))
		}
		links = append(links, l)
	}
	for _, o := range entry {
		l, err := ex.Uprobe(o.name, a.entry, &link.UprobeOptions{Address: o.offset, Cookie: uint64(probe)})
		if err != nil {
			return fail(fmt.Errorf("attach entry %s at %#x: %w", o.name, o.offset, err))
		}
		links = append(links, l)
	}
	return links, nil
}

func (a *attacher) stats(st *Stats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st.Files = len(a.links)
	for _, ls := range a.links {
		st.Links += len(ls)
	}
	st.Missing = a.missing
	st.Refused = a.refused
}

// close detaches every probe.
func (a *attacher) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	var errs []error
	for id, ls := range a.links {
		for _, l := range ls {
			errs = append(errs, l.Close())
		}
		delete(a.links, id)
	}
	return errors.Join(errs...)
}
