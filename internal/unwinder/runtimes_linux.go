//go:build linux

package unwinder

import (
	"debug/elf"
	"maps"
	"slices"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// fileRuntime is the interpreter of a runtime found in a file.
type fileRuntime struct {
	rt *runtimes.Runtime
	in runtimes.Interpreter
}

// detectRuntime returns the interpreter of a runtime in ef, mapped from
// path, or nil; one of a version its walker does not know is counted.
func (l *Loader) detectRuntime(path string, ef *elf.File) *fileRuntime {
	for _, rt := range all.Runtimes {
		if !rt.LooksLike(path) {
			continue
		}
		var in runtimes.Interpreter
		err := noPanic(func() (err error) { in, err = rt.Detect(ef); return err })
		switch {
		case err != nil:
			l.countRuntime(rt, func(s *RuntimeStats) { s.Unsupported++ })
		case in != nil:
			return &fileRuntime{rt, in}
		}
	}
	return nil
}

// addRuntime tells the runtime's BPF walker where pid's interpreter is;
// bias is the load bias of the file holding it. It reports whether the
// entry was added.
func (l *Loader) addRuntime(pid uint32, fr *fileRuntime, bias uint64) bool {
	m := l.maps.Runtimes[fr.rt.Name]
	if m == nil {
		return false
	}
	if err := m.Put(&pid, fr.in.WalkerProc(bias)); err != nil {
		l.countRuntime(fr.rt, func(s *RuntimeStats) { s.MapFull++ })
		return false
	}
	return true
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
		for _, rt := range lp.runtimes {
			if st == nil {
				st = map[string]RuntimeStats{}
			}
			s := st[rt.Name]
			s.Processes++
			st[rt.Name] = s
		}
	}
	return st
}
