package symbolize

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// The perf maps of the processes the symbolizer caches: when each is read,
// and the budget they share.

// perfMapName is the perf map of a process whose status is st: JIT
// runtimes name it with the pid the process sees itself as, the last NSpid
// column (NSpid lists the pid from our namespace inwards). Without NSpid
// (old kernels) it is pid.
func perfMapName(pid uint32, st procfs.Status) string {
	if len(st.NSpid) > 0 {
		pid = st.NSpid[len(st.NSpid)-1]
	}
	return fmt.Sprintf("/tmp/perf-%d.map", pid)
}

// jitName names addr through the perf map of pid: read (again) when live,
// else the one read before, if any.
func (s *Symbolizer) jitName(pid uint32, p *process, addr uint64, live bool) string {
	if live {
		return s.perfMapLookup(pid, p, addr)
	}
	if p.perfMap == nil {
		return ""
	}
	return p.perfMap.lookup(addr)
}

// perfMapLookup resolves addr through the perf map of pid.
func (s *Symbolizer) perfMapLookup(pid uint32, p *process, addr uint64) string {
	// Read the file at most once per refresh interval, and on a miss at
	// most once per perfMapMissInterval: JIT code is often named just
	// after the last read (an unchanged file is not parsed again).
	if since := s.now().Sub(p.perfMapAt); p.perfMapAt.IsZero() || since >= s.refreshInterval {
		p.perfMapAt = s.now()
		s.loadPerfMap(pid, p)
	} else if since >= min(perfMapMissInterval, s.refreshInterval) && (p.perfMap == nil || p.perfMap.lookup(addr) == "") {
		p.perfMapAt = s.now()
		s.loadPerfMap(pid, p)
	}
	if p.perfMap == nil {
		return ""
	}
	return p.perfMap.lookup(addr)
}

// perfMapMissInterval is how soon after a read a perf map is read again
// for an address it does not name.
const perfMapMissInterval = 100 * time.Millisecond

// loadPerfMap (re-)reads the perf map of pid into p, under the deadline. A
// refused or unreadable map is logged once per file and reason, and counted
// once each time p's map goes from readable to not.
func (s *Symbolizer) loadPerfMap(pid uint32, p *process) {
	st, err := s.proc.Status(pid)
	if err != nil {
		p.perfMapErr = err // the process is gone
		return
	}
	file := perfMapName(pid, st)
	name := s.proc.RootPath(pid, file)
	prev := p.perfMap
	pm, err := procfs.Within(s.deadline, name, func() (*perfMap, error) {
		return s.readPerfMap(pid, file, st, prev)
	}, nil)
	if err == nil {
		if pm != prev {
			s.dropPerfMap(p)
			s.addPerfMap(p, pm)
		}
		p.perfMapErr = nil
		return
	}
	if errors.Is(err, os.ErrNotExist) {
		p.perfMapErr = err // no JIT, or not yet: keep what was read
		return
	}
	reason := procfs.RefusalReason(err)
	if reason != "" {
		// A refused map is not used, even if an earlier one was fine.
		s.dropPerfMap(p)
	}
	first := p.perfMapErr == nil || procfs.RefusalReason(p.perfMapErr) != reason
	p.perfMapErr = err
	if !first {
		return
	}
	if reason == "" {
		s.stats.FileErrors++
	} else {
		s.countRefused(reason)
	}
	if s.once.first("perfmap:" + reason + ":" + name) {
		if reason == "" {
			s.log.Info("cannot read perf map", zap.String("file", name), zap.Uint32("pid", pid), zap.Error(err))
		} else {
			s.log.Warn("perf map refused: JIT frames of the process stay unsymbolized",
				zap.String("file", name), zap.Uint32("pid", pid), zap.String("reason", reason), zap.Error(err))
		}
	}
}

// addPerfMap installs pm as p's perf map. When the perf maps of all
// processes would hold more than the budget, the others are dropped (they
// are read again on their next miss).
func (s *Symbolizer) addPerfMap(p *process, pm *perfMap) {
	if s.perfMapBytes+pm.heapCost() > perfMapBudget*s.maxPerfMap {
		s.procs.each(func(_ uint32, q *process) { s.dropPerfMap(q) })
	}
	p.perfMap = pm
	s.perfMapBytes += pm.heapCost()
}

// dropPerfMap forgets the perf map of p.
func (s *Symbolizer) dropPerfMap(p *process) {
	if p.perfMap != nil {
		s.perfMapBytes -= p.perfMap.heapCost()
		p.perfMap = nil
	}
}
