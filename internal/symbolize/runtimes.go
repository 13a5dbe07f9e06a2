package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// Why a runtime frame was left without a name (Stats.RuntimeUnsymbolized).
const (
	RuntimeNoInterpreter = "no_interpreter" // no known interpreter of the runtime among the process's mappings
	RuntimeMemory        = "memory"         // the process's memory could not be opened (exited, no CAP_SYS_PTRACE) or did not answer in time
	RuntimeBadObject     = "bad_code"       // the frame's object (a code object) could not be read or is not one
)

// runtimeProcess is what is cached about one runtime in one process.
type runtimeProcess struct {
	frames runtimes.Process // nil: no interpreter found, or no memory
	mem    *os.File         // /proc/<pid>/mem
	err    string           // why there is no frames
	// A read of mem that did not answer in time (a loaded node, or memory
	// the process holds: userfaultfd, a stuck fault) stops its reads until
	// quietUntil; quiet doubles with each such read, from firstQuiet to
	// maxQuiet, and is cleared by one that answers. A read still stuck is
	// not started again (procfs.Deadline), so no goroutine piles up.
	quietUntil time.Time
	quiet      time.Duration
}

const (
	firstQuiet = time.Second
	maxQuiet   = time.Minute
)

// usable says whether rp's frames may be asked at now: not while its
// memory is waited out, nor while a read that missed its deadline still
// runs (it holds rp.frames).
func (rp *runtimeProcess) usable(d *procfs.Deadline, now time.Time) bool {
	return !now.Before(rp.quietUntil) && !d.Busy(rp.mem.Name())
}

// noAnswer notes that a read of rp's memory did not answer in time (err):
// its reads wait a while, logged once per process and runtime.
func (s *Symbolizer) noAnswer(rp *runtimeProcess, pid uint32, runtime string, err error, now time.Time) {
	rp.quiet = min(max(2*rp.quiet, firstQuiet), maxQuiet)
	rp.quietUntil = now.Add(rp.quiet)
	if s.once.first(fmt.Sprintf("rtquiet:%d:%s", pid, runtime)) {
		s.log.Info("a process's memory did not answer in time; its runtime frames stay unnamed while it is waited out",
			zap.Uint32("pid", pid), zap.String("runtime", runtime), zap.Duration("first_wait", rp.quiet), zap.Error(err))
	}
}

// ask names a frame through rp: from what it read before, else by a read
// of its memory under the deadline (errQuiet while that memory is waited
// out).
func (s *Symbolizer) ask(rp *runtimeProcess, pid uint32, runtime string, now time.Time,
	cached func() (runtimes.Frame, bool), read func() (runtimes.Frame, error)) (runtimes.Frame, error) {
	if !rp.usable(s.deadline, now) {
		return runtimes.Frame{}, errQuiet
	}
	if named, ok := cached(); ok {
		return named, nil
	}
	named, err := procfs.Within(s.deadline, rp.mem.Name(), read, nil)
	if procfs.RefusalReason(err) != "" {
		s.noAnswer(rp, pid, runtime, err, now)
	} else {
		rp.quiet = 0
	}
	return named, err
}

// errQuiet is a read not started: the process's memory is waited out.
var errQuiet = &procfs.RefusedError{Reason: procfs.ReasonStuck, Detail: "an earlier read did not answer in time"}

// Runtime symbolizes a frame of runtime (internal/runtimes) in process
// pid: the object at object, at position; native is, for a frame the walk
// read in place, the address of its native frame (0 otherwise). It returns
// the frames of the functions inlined there (Inlined, innermost first) and
// the frame's own, last, all with the runtime's frame type; a frame that
// cannot be named has no function name and is counted by reason.
func (s *Symbolizer) Runtime(pid uint32, runtime string, object uint64, position uint32, native uint64) []report.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	frame := report.Frame{Address: object, Type: runtime}
	rp := s.runtimeProcess(pid, s.process(pid), runtime)
	reason := rp.err
	var inlined []runtimes.Frame
	if reason == "" {
		now := s.now()
		cached, read := rp.frames.Cached, rp.frames.Read
		if pcp, ok := rp.frames.(runtimes.PCProcess); ok && native != 0 {
			cached = func(o uint64, p uint32, now time.Time) (runtimes.Frame, bool) { return pcp.CachedPC(o, p, native, now) }
			read = func(o uint64, p uint32, now time.Time) (runtimes.Frame, error) { return pcp.ReadPC(o, p, native, now) }
		}
		named, err := s.ask(rp, pid, runtime, now, func() (runtimes.Frame, bool) { return cached(object, position, now) },
			func() (runtimes.Frame, error) { return read(object, position, now) })
		switch {
		case procfs.RefusalReason(err) != "":
			reason = RuntimeMemory
		case err != nil:
			reason = RuntimeBadObject
			if s.once.first(fmt.Sprintf("rtobject:%d", pid)) {
				s.log.Debug("cannot read a runtime frame's object", zap.Uint32("pid", pid),
					zap.String("runtime", runtime), zap.Error(err))
			}
		default:
			frame.Function, frame.File, frame.Line = named.Function, named.File, named.Line
			inlined = named.Inlined
		}
	}
	s.countRuntime(runtime, reason)
	out := make([]report.Frame, 0, len(inlined)+1)
	for _, in := range inlined {
		out = append(out, report.Frame{Address: object, Function: in.Function, File: in.File, Line: in.Line, Type: runtime, Inlined: true})
	}
	return append(out, frame)
}

// countRuntime counts a frame of runtime named (reason "") or not.
func (s *Symbolizer) countRuntime(runtime, reason string) {
	if reason == "" {
		if s.stats.RuntimeFrames == nil {
			s.stats.RuntimeFrames = map[string]uint64{}
		}
		s.stats.RuntimeFrames[runtime]++
		return
	}
	if s.stats.RuntimeUnsymbolized == nil {
		s.stats.RuntimeUnsymbolized = map[string]map[string]uint64{}
	}
	if s.stats.RuntimeUnsymbolized[runtime] == nil {
		s.stats.RuntimeUnsymbolized[runtime] = map[string]uint64{}
	}
	s.stats.RuntimeUnsymbolized[runtime][reason]++
}

// cloneRuntimeUnsymbolized copies m, maps and all.
func cloneRuntimeUnsymbolized(m map[string]map[string]uint64) map[string]map[string]uint64 {
	if m == nil {
		return nil
	}
	out := make(map[string]map[string]uint64, len(m))
	for rt, reasons := range m {
		out[rt] = maps.Clone(reasons)
	}
	return out
}

// runtimeProcess returns the state of runtime in p, finding its
// interpreter on first use among the executable mappings p has.
func (s *Symbolizer) runtimeProcess(pid uint32, p *process, runtime string) *runtimeProcess {
	if rp := p.runtimes[runtime]; rp != nil {
		return rp
	}
	rp := &runtimeProcess{err: RuntimeNoInterpreter}
	if p.runtimes == nil {
		p.runtimes = map[string]*runtimeProcess{}
	}
	p.runtimes[runtime] = rp
	rt := all.ByName(runtime)
	if rt == nil {
		return rp
	}
	var in runtimes.Interpreter
	var bias uint64
	for _, m := range p.maps {
		if !m.FileBacked() {
			continue
		}
		ef, _ := s.elf(pid, m)
		if ef == nil {
			continue
		}
		if in = ef.interpreter(rt); in != nil {
			if v, ok := ef.vaddr(m.Offset); ok {
				bias = m.Start - v
			}
			break
		}
	}
	if in == nil {
		return rp
	}
	mem, err := os.Open(s.proc.Path(pid, "mem"))
	if err != nil {
		rp.err = RuntimeMemory
		if s.once.first(fmt.Sprintf("rtmem:%d", pid)) {
			s.log.Info("cannot read a process's memory for its runtime frames", zap.Uint32("pid", pid), zap.Error(err))
		}
		return rp
	}
	rp.mem, rp.err = mem, ""
	rp.frames = in.Process(mem, bias)
	return rp
}

// dropRuntimes closes what p holds of its runtimes.
func dropRuntimes(p *process) {
	for _, rp := range p.runtimes {
		if rp.mem != nil {
			_ = rp.mem.Close()
		}
	}
	p.runtimes = nil
}

// fileInterpreter is the interpreter of one runtime in a file, or why a
// file that looks like one is not usable.
type fileInterpreter struct {
	in  runtimes.Interpreter
	err error
}

// interpreter returns the interpreter of rt in ef, or nil; found once per
// file, from what the file is (its dynamic symbols), whatever its name.
func (ef *elfFile) interpreter(rt *runtimes.Runtime) runtimes.Interpreter {
	if fi, ok := ef.interps[rt]; ok {
		return fi.in
	}
	var fi fileInterpreter
	if ef.mapped != nil {
		if ferr := withFaultPanic(func() {
			var f *elf.File
			if f, fi.err = elf.NewFile(bytes.NewReader(ef.mapped.data)); fi.err == nil && rt.MayHold(f) {
				fi.in, fi.err = rt.Detect(f)
			}
		}); ferr != nil {
			fi.err = ferr
		}
		ef.releasePages() // detection may read all its symbols
	}
	if ef.interps == nil {
		ef.interps = map[*runtimes.Runtime]fileInterpreter{}
	}
	ef.interps[rt] = fi
	return fi.in
}

// entryCode is the entry function of the runtime process p runs whose JIT
// code the anonymous mapping m holds, code that runs on the entry
// function's frame (Runtime.EntryCode: PHP's JIT buffer); "" for another
// mapping.
func (s *Symbolizer) entryCode(pid uint32, p *process, m procfs.Map) string {
	for _, rt := range all.Runtimes {
		if rt.EntryCode != nil && rt.EntryCode(m) && s.runtimeProcess(pid, p, rt.Name).frames != nil {
			return rt.EntryFunction
		}
	}
	return ""
}

// codeFrames names JIT code at addr (la its lookup address) through the
// runtimes that name code (HotSpot), when the process runs one and addr is
// its code: the frames inlined there (innermost first, Inlined) and the
// code's own; false otherwise (then perf maps are tried).
func (s *Symbolizer) codeFrames(pid uint32, p *process, addr, la uint64) ([]report.Frame, bool) {
	for _, rt := range all.Runtimes {
		if !rt.NamesCode {
			continue
		}
		rp := s.runtimeProcess(pid, p, rt.Name)
		if rp.frames == nil {
			continue
		}
		now := s.now()
		named, err := s.ask(rp, pid, rt.Name, now, func() (runtimes.Frame, bool) { return rp.frames.Cached(la, 0, now) },
			func() (runtimes.Frame, error) { return rp.frames.Read(la, 0, now) })
		if err != nil {
			continue // not its code, or not readable: perf maps may know it
		}
		s.countRuntime(rt.Name, "")
		out := make([]report.Frame, 0, len(named.Inlined)+1)
		for _, in := range named.Inlined {
			out = append(out, report.Frame{Address: addr, Function: in.Function, File: in.File, Line: in.Line, Type: rt.Name, Inlined: true})
		}
		return append(out, report.Frame{Address: addr, Function: named.Function, File: named.File, Line: named.Line, Type: rt.Name}), true
	}
	return nil, false
}
