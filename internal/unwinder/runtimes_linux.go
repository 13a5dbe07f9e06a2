//go:build linux

package unwinder

import (
	"debug/elf"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// fileRuntime is the interpreter of a runtime found in a file.
type fileRuntime struct {
	rt *runtimes.Runtime
	in runtimes.Interpreter
}

// detectRuntime returns the interpreter of a runtime in ef, or nil,
// found from what the file is, not its name (a table is shared by the
// copies of a file under other names); one of a version its walker does
// not know is counted.
func (l *Loader) detectRuntime(ef *elf.File) *fileRuntime {
	for _, rt := range all.Runtimes {
		if !rt.MayHold(ef) {
			continue
		}
		var in runtimes.Interpreter
		err := noPanic(func() (err error) { in, err = rt.Detect(ef); return err })
		switch {
		case err != nil:
			l.countRuntime(rt, func(s *RuntimeStats) {
				s.Unsupported++
				if msg := err.Error(); len(s.Errors) < maxUnsupportedErrors && !slices.Contains(s.Errors, msg) && !l.unsupportedSeen[msg] {
					s.Errors = append(s.Errors, msg)
				}
			})
		case in != nil:
			return &fileRuntime{rt, in}
		}
	}
	return nil
}

// addRuntime tells the runtime's BPF walker where pid's interpreter is;
// bias is the load bias of the file holding it. It reports whether the
// entry was added; a process whose runtime is not ready (a JVM still
// making its code cache) is noted in lp, asked again soon (retryRuntimes).
func (l *Loader) addRuntime(lp *loadedProcess, fr *fileRuntime, bias uint64) bool {
	if slices.Contains(lp.runtimes, fr.rt) || slices.ContainsFunc(lp.waiting, func(w waitingRuntime) bool { return w.fr == fr }) {
		return false
	}
	value, err := l.walkerProc(lp.pid, fr, bias)
	if err != nil {
		now := time.Now()
		l.waitRuntime(lp, waitingRuntime{fr: fr, bias: bias, since: now, next: now.Add(runtimeRetryFirst)})
		return false
	}
	return l.putRuntime(lp, fr, value)
}

// walkerProc returns the walker's entry of pid's runtime, reading the
// process's memory (under the loader's deadline) when the runtime needs it.
func (l *Loader) walkerProc(pid uint32, fr *fileRuntime, bias uint64) ([]byte, error) {
	name := l.proc.Path(pid, "mem")
	return procfs.Within(l.deadline, name, func() ([]byte, error) {
		mem := &lazyMem{path: name}
		defer mem.close()
		var value []byte
		err := noPanic(func() (err error) { value, err = fr.in.WalkerProc(mem, bias); return err })
		return value, err
	}, nil)
}

// lazyMem is a process's memory, opened at the first read: most runtimes'
// walkers need none of it.
type lazyMem struct {
	path string
	f    *os.File
	err  error
}

func (m *lazyMem) ReadAt(b []byte, off int64) (int, error) {
	if m.f == nil && m.err == nil {
		m.f, m.err = os.Open(m.path)
	}
	if m.err != nil {
		return 0, m.err
	}
	return m.f.ReadAt(b, off)
}

func (m *lazyMem) close() {
	if m.f != nil {
		m.f.Close()
	}
}

// putRuntime adds pid's entry to the runtime's walker map.
func (l *Loader) putRuntime(lp *loadedProcess, fr *fileRuntime, value []byte) bool {
	m := l.maps.Runtimes[fr.rt.Name]
	if m == nil {
		return false
	}
	if err := m.Put(&lp.pid, value); err != nil {
		l.countRuntime(fr.rt, func(s *RuntimeStats) { s.MapFull++ })
		return false
	}
	lp.runtimes = append(lp.runtimes, fr.rt)
	version := ""
	if v, ok := fr.in.(runtimes.Versioned); ok {
		version = v.RuntimeVersion()
	}
	lp.versions = append(lp.versions, version)
	if cr, ok := fr.in.(runtimes.CodeRanges); ok {
		l.addCodeRanges(lp, cr.CodeRanges(value))
	}
	return true
}

// addCodeRanges maps a runtime's code ranges whole as anonymous executable
// memory (walked by the runtimes' walkers), beside the process's mappings
// as they were read: code committed later is in them too.
func (l *Loader) addCodeRanges(lp *loadedProcess, ranges [][2]uint64) {
	value := bpf.CpuUnwindMapping{Table: anonTable, Runtime: lp.inPlace}
	for _, r := range ranges {
		for _, b := range blocks(r[0], r[1]) {
			key := bpf.CpuUnwindMappingKey{Prefixlen: b.prefixLen(), Pid: lp.pid, Addr: bigEndian(b.addr)}
			if err := l.maps.Mappings.Put(&key, &value); err != nil {
				l.stats.MappingsFull++
				return
			}
			lp.keys = append(lp.keys, key)
			lp.keyFiles = append(lp.keyFiles, fileKey{})
		}
	}
}

// waitingRuntime is a runtime of a process not ready for its walker yet:
// asked first since, next at next.
type waitingRuntime struct {
	fr          *fileRuntime
	bias        uint64
	tries       int
	since, next time.Time
}

// A runtime not ready is asked again after runtimeRetryFirst, then twice
// as long after each try, at most runtimeQuickGap apart for its first
// runtimeQuickWait and sweepInterval apart after, for maxRuntimeWait: a JVM
// makes its code cache in its first tenths of a second, a node started
// beside busy programs its isolate in a few seconds, and a walker entry
// asked late loses its samples until then.
const (
	runtimeRetryFirst = 100 * time.Millisecond
	runtimeQuickGap   = 500 * time.Millisecond
	runtimeQuickWait  = 10 * time.Second
	maxRuntimeWait    = time.Minute
)

// runtimeRetryGap is how long after its tries-th failed try a runtime
// waiting since since is asked again, at now.
func runtimeRetryGap(tries int, since, now time.Time) time.Duration {
	limit := sweepInterval
	if now.Sub(since) < runtimeQuickWait {
		limit = runtimeQuickGap
	}
	return min(runtimeRetryFirst<<min(tries, 8), limit)
}

// waitRuntime notes w in lp, due at w.next.
func (l *Loader) waitRuntime(lp *loadedProcess, w waitingRuntime) {
	lp.waiting = append(lp.waiting, w)
	if l.runtimeRetry.IsZero() || w.next.Before(l.runtimeRetry) {
		l.runtimeRetry = w.next
	}
}

// retryRuntimes asks the runtimes of the processes that were not ready
// again once due, reading their memory outside the lock; a process loaded
// again meanwhile is left to its new load. It returns at once while none
// is due: it is called often (Tables.sweep).
func (l *Loader) retryRuntimes() {
	type ask struct {
		lp *loadedProcess
		w  waitingRuntime
	}
	var asks []ask
	now := time.Now()
	l.mu.Lock()
	if l.runtimeRetry.IsZero() || now.Before(l.runtimeRetry) {
		l.mu.Unlock()
		return
	}
	l.runtimeRetry = time.Time{}
	for _, lp := range l.procs {
		waiting := lp.waiting
		lp.waiting = nil
		for _, w := range waiting {
			switch {
			case now.Before(w.next):
				l.waitRuntime(lp, w)
			case now.Sub(w.since) > maxRuntimeWait:
				l.countRuntime(w.fr.rt, func(s *RuntimeStats) { s.NotReady++ })
			default:
				asks = append(asks, ask{lp, w})
			}
		}
	}
	l.mu.Unlock()
	for _, a := range asks {
		value, err := l.walkerProc(a.lp.pid, a.w.fr, a.w.bias)
		l.mu.Lock()
		switch {
		case l.procs[a.lp.pid] != a.lp:
		case err != nil:
			a.w.tries++
			retried := time.Now()
			a.w.next = retried.Add(runtimeRetryGap(a.w.tries, a.w.since, retried))
			l.waitRuntime(a.lp, a.w)
		default:
			l.putRuntime(a.lp, a.w.fr, value)
		}
		l.mu.Unlock()
	}
}

// dropRuntimes deletes the walkers' entries of lp that kept (the
// process's entries now, or nil) does not have.
func (l *Loader) dropRuntimes(lp, kept *loadedProcess) {
	for _, rt := range lp.runtimes {
		if kept == nil || !slices.Contains(kept.runtimes, rt) {
			_ = l.maps.Runtimes[rt.Name].Delete(&lp.pid) // gone already: nothing to do
		}
	}
}

// maxUnsupportedErrors bounds the reasons kept between two takes.
const maxUnsupportedErrors = 16

// takeUnsupportedErrors returns the reasons rt's interpreters were refused
// since the previous call, each once in the loader's life (at most 1024
// remembered).
func (l *Loader) takeUnsupportedErrors(rt string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats.Runtimes[rt]
	errs := s.Errors
	s.Errors = nil
	if l.stats.Runtimes != nil {
		l.stats.Runtimes[rt] = s
	}
	for _, e := range errs {
		if l.unsupportedSeen == nil || len(l.unsupportedSeen) >= 1024 {
			l.unsupportedSeen = map[string]bool{}
		}
		l.unsupportedSeen[e] = true
	}
	return errs
}

// countRuntime updates the counters of rt.
func (l *Loader) countRuntime(rt *runtimes.Runtime, update func(*RuntimeStats)) {
	if l.stats.Runtimes == nil {
		l.stats.Runtimes = map[string]RuntimeStats{}
	}
	s := l.stats.Runtimes[rt.Name]
	update(&s)
	l.stats.Runtimes[rt.Name] = s
}

// runtimeStats returns the runtime counters of st with the processes whose
// frames each runtime's walker reads.
func (l *Loader) runtimeStats(st map[string]RuntimeStats) map[string]RuntimeStats {
	st = maps.Clone(st)
	for _, lp := range l.procs {
		for i, rt := range lp.runtimes {
			if st == nil {
				st = map[string]RuntimeStats{}
			}
			s := st[rt.Name]
			s.Processes++
			if v := lp.versions[i]; v != "" {
				if s.Versions == nil { // the counters' own have none
					s.Versions = map[string]uint64{}
				}
				s.Versions[v]++
			}
			st[rt.Name] = s
		}
	}
	return st
}
