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

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// attacher finds files matching the probes in processes' maps and attaches
// uprobes to them, once per (file, probe); failed attaches are tried again
// at each rescan (see attempts).
type attacher struct {
	proc     procfs.FS
	log      *zap.Logger
	specs    []compiledSpec
	programs func(probe int) (probePrograms, uint64)
	// attachFile attaches one probe to the file at path (a.attach; replaced
	// in tests to fail like a missing permission), with the goroutine's
	// programs in a Go binary, whose attach cookies get labels (see
	// goLabels) in their upper half.
	attachFile func(path string, probe int, entry, exit []symOffset, goroutine bool, labels uint64) ([]link.Link, error)
	// goLabels returns the upper half of the attach cookie of the Go
	// uprobes in file f (id) that read the goroutine's labels; 0: none
	// (nil: never).
	goLabels func(id fileID, f *os.File) uint64
	// usdtArgs returns the usdt_specs index + 1 of an entry site's
	// argument fetch, bits 16 to 31 of its uprobe's attach cookie (nil:
	// no arguments fetched).
	usdtArgs func(*bpf.ProbeUsdtArgsSpec) (uint32, error)
	// argsProgram returns, on a kernel without attach cookies, the entry
	// program of probe with the fetch args (usdtArgs) built in; nil: the
	// kernel has attach cookies.
	argsProgram func(probe int, args uint32) (*ebpf.Program, error)

	// deadline bounds the opens of probed files: on FUSE or a dead
	// network file system an open can block forever.
	deadline *procfs.Deadline

	mu       sync.Mutex
	attempts *attempts
	links    map[fileID][]link.Link
	missing  int
	refused  int
	closed   bool
}

func newAttacher(proc procfs.FS, log *zap.Logger, specs []compiledSpec,
	programs func(probe int) (probePrograms, uint64)) *attacher {
	a := &attacher{
		proc: proc, log: log, specs: specs, programs: programs,
		deadline: procfs.NewDeadline(openTimeout, maxStuckOpens),
		attempts: newAttempts(),
		links:    make(map[fileID][]link.Link),
	}
	a.attachFile = a.attach
	return a
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
			if a.scanPID(pid) && len(execScanDelays) > 1 {
				pending = append(pending, pendingScan{pid: pid, due: time.Now().Add(execScanDelays[1]), next: 2})
			}
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

// scanAll scans every process, trying failed attaches again.
func (a *attacher) scanAll() {
	a.mu.Lock()
	a.attempts.rescan()
	a.mu.Unlock()
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
			if a.attempts.due(attempt{id, i}) && s.file.MatchString(path) {
				probes = append(probes, i)
			}
		}
		if len(probes) > 0 {
			cands = append(cands, candidate{m, probes})
		}
	}
	a.mu.Unlock()
	for _, c := range cands {
		a.probeFile(pid, c.m, c.probes)
	}
	return true
}

// probeFile resolves the symbols or USDT probes of probes in the file of
// mapping m and attaches them.
func (a *attacher) probeFile(pid uint32, m procfs.Map, probes []int) {
	id := fileID{dev: uint64(m.DevMajor)<<32 | uint64(m.DevMinor), inode: m.Inode}
	// The file is the process's to choose: open the mapped file itself
	// (procfs.OpenMappedFile: inside the process's root, same device and
	// inode, a regular local file), read its symbols from that descriptor
	// and attach through it (procfs.FDPath), never by a path the process
	// could point elsewhere between the read and the attach.
	name := a.proc.RootPath(pid, strings.TrimSuffix(m.Path, " (deleted)"))
	f, err := procfs.Within(a.deadline, name, func() (*os.File, error) { return a.proc.OpenMappedFile(pid, m) },
		func(f *os.File) { f.Close() })
	var queries []symbolQuery
	usdtProbes := false
	for _, i := range probes {
		switch {
		case a.specs[i].usdt():
			usdtProbes = true
		case a.specs[i].Return:
			queries = append(queries, a.specs[i].entry)
		default:
			queries = append(queries, a.specs[i].entry, a.specs[i].exit)
		}
	}
	var funcs symbolize.ELFFunctions
	var notes fileNotes
	if err == nil {
		defer f.Close()
		if usdtProbes {
			notes = readNotes(f)
		}
		if len(queries) > 0 {
			funcs, err = symbolize.FindFunctions(f, func(sym string) bool {
				return slices.ContainsFunc(queries, func(q symbolQuery) bool { return q.match(sym) })
			})
		}
	}
	if errors.Is(err, fs.ErrNotExist) && procfs.RefusalReason(err) == "" {
		return // the process is gone; another scan retries
	}
	if procfs.RefusalReason(err) == procfs.ReasonBusy {
		return // a concurrent scan is opening the file: it attaches or notes the failure
	}
	var labels uint64
	if err == nil && funcs.Go && a.goLabels != nil {
		labels = a.goLabels(id, f)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, i := range probes {
		key := attempt{id, i}
		if !a.attempts.due(key) {
			continue // attached (or failed) in a concurrent scan
		}
		s := a.specs[i]
		log := a.log.With(zap.String("probe", s.ID), zap.String("file", m.Path), zap.Uint32("pid", pid))
		if err != nil && (f == nil || !s.usdt()) {
			if !retryRead(err) {
				a.attempts.finish(key) // a malformed or refused file stays so
				log.Warn("cannot read symbols of probed file", zap.String("reason", procfs.RefusalReason(err)), zap.Error(err))
				continue
			}
			a.failed(key, log, "cannot read symbols of probed file; tried again at the next rescan",
				capabilities.Explain(err, capabilities.SysPtrace, capabilities.DACReadSearch))
			continue
		}
		entry, exit, goroutine, missing, refused := resolveSites(s, funcs, notes)
		if refused == nil && missing == "" {
			refused = a.argsCookies(entry)
		}
		if refused != nil {
			a.attempts.finish(key)
			a.refused++
			log.Warn("probe not attached: "+refused.what, zap.Error(refused.err))
			continue
		}
		if missing != "" {
			a.attempts.finish(key)
			a.missing++
			what, field := "symbol", "symbol"
			if s.usdt() {
				what, field = "USDT probe", "usdt_probe"
			}
			log.Warn("probe not attached: "+what+" not found in file", zap.String(field, missing))
			continue
		}
		links, err := a.attachFile(a.proc.FDPath(f), i, entry, exit, goroutine, labels)
		if errors.Is(err, fs.ErrNotExist) {
			log.Debug("process gone while attaching; the next scan of a process mapping the file retries", zap.Error(err))
			continue
		}
		if err != nil {
			a.failed(key, log, "cannot attach probe; tried again at the next rescan",
				capabilities.Explain(err, capabilities.SysAdmin))
			continue
		}
		a.attempts.finish(key)
		a.links[id] = append(a.links[id], links...)
		log.Debug("probe attached", zap.Int("uprobes", len(links)))
	}
}

// argsCookies gives each entry site with an argument fetch its
// usdt_specs index (symOffset.argsCookie); without attach cookies the
// sites fetch nothing.
func (a *attacher) argsCookies(entry []symOffset) *refusal {
	for i := range entry {
		if entry[i].args == nil || a.usdtArgs == nil {
			continue
		}
		c, err := a.usdtArgs(entry[i].args)
		if err != nil {
			return &refusal{"its arguments cannot be fetched", err}
		}
		entry[i].argsCookie = c
	}
	return nil
}

// refusal is why a probe is not attached to a file: what its warning
// says, and the error behind it.
type refusal struct {
	what string
	err  error
}

// resolveSites returns where probe s's uprobes go in a file with functions
// funcs and USDT notes: missing names a symbol or USDT probe the file
// lacks.
func resolveSites(s compiledSpec, funcs symbolize.ELFFunctions, notes fileNotes) (
	entry, exit []symOffset, goroutine bool, missing string, refused *refusal) {
	if s.usdt() {
		entry, exit, missing, err := notes.usdtSites(s.Spec, s.attrs)
		if err != nil {
			return nil, nil, false, "", &refusal{"its USDT probes cannot be used in this file", err}
		}
		return entry, exit, false, missing, nil
	}
	entry = offsets(funcs.Symbols, s.entry)
	exit = entry
	if !s.Return {
		exit = offsets(funcs.Symbols, s.exit)
	}
	if funcs.Go && len(entry) > 0 && len(exit) > 0 {
		var err error
		goroutine, err = goCode(funcs, s)
		if err == nil && goroutine {
			entry, exit, err = goSites(funcs, s)
		}
		if err != nil {
			return nil, nil, false, "", &refusal{"a Go function it names has no place for its uprobes", err}
		}
	}
	switch {
	case len(entry) == 0:
		missing = s.EntrySymbol
	case len(exit) == 0:
		missing = s.ExitSymbol
	}
	return entry, exit, goroutine, missing, nil
}

// failed records a failed attempt of key: a warning the first time, debug
// after that.
func (a *attacher) failed(key attempt, log *zap.Logger, msg string, err error) {
	if a.attempts.fail(key) {
		log.Warn(msg, zap.Error(err))
		return
	}
	log.Debug(msg, zap.Error(err))
}

// symOffset is one uprobe's place: its symbol (or USDT probe) name, file
// offset and, for a USDT probe with a semaphore, the semaphore's file
// offset (the uprobe's reference counter; 0: none). A USDT probe's site
// has its argument specs as the note writes them; an entry site, the
// fetch of its probe's attributes (args, nil: none) and that fetch's
// usdt_specs index + 1 (argsCookie, bits 16 to 31 of its attach cookie).
type symOffset struct {
	name           string
	offset, refCtr uint64
	argSpecs       string
	args           *bpf.ProbeUsdtArgsSpec
	argsCookie     uint32
}

// offsets returns the distinct offsets of the symbols q matches (aliases such
// as C1/C2 constructors share one offset: one uprobe).
func offsets(syms []symbolize.FunctionSymbol, q symbolQuery) []symOffset {
	var out []symOffset
	for _, s := range syms {
		if q.match(s.Name) && (len(out) == 0 || out[len(out)-1].offset != s.Offset) {
			out = append(out, symOffset{name: s.Name, offset: s.Offset})
		}
	}
	return out
}

// attach places the exit side first, so a scope entered while attaching
// is never left open; on error nothing stays attached. In a Go binary
// (goroutine) every uprobe is a plain one and keys the goroutine's scope,
// its cookie's upper half labels.
func (a *attacher) attach(path string, probe int, entry, exit []symOffset, goroutine bool, labels uint64) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	progs, cookie := a.programs(probe)
	if goroutine {
		cookie |= labels
	}
	entryProg, exitProg := progs.entry(goroutine), progs.exit(goroutine)
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			_ = l.Close()
		}
		return nil, err
	}
	for _, o := range exit {
		opts := &link.UprobeOptions{Address: o.offset, RefCtrOffset: o.refCtr, Cookie: cookie}
		var l link.Link
		if a.specs[probe].Return && !goroutine {
			l, err = ex.Uretprobe(o.name, exitProg, opts)
		} else {
			l, err = ex.Uprobe(o.name, exitProg, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("attach exit %s at %#x: %w", o.name, o.offset, err))
		}
		links = append(links, l)
	}
	for _, o := range entry {
		prog, c := entryProg, cookie
		if o.argsCookie != 0 && a.argsProgram != nil {
			if prog, err = a.argsProgram(probe, o.argsCookie); err != nil {
				return fail(fmt.Errorf("entry program of %s at %#x: %w", o.name, o.offset, err))
			}
		} else {
			c |= uint64(o.argsCookie) << 16
		}
		l, err := ex.Uprobe(o.name, prog, &link.UprobeOptions{Address: o.offset, RefCtrOffset: o.refCtr, Cookie: c})
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
	st.Failed = a.attempts.failing()
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
