package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/python"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Why a CPython frame was left without a name (Stats.PythonUnsymbolized).
const (
	PythonNoInterpreter = "no_interpreter" // no known CPython interpreter among the process's mappings
	PythonMemory        = "memory"         // the process's memory could not be opened (exited, no CAP_SYS_PTRACE) or did not answer in time
	PythonBadCode       = "bad_code"       // the code object could not be read or is not one
)

// maxPythonCodes bounds the code objects cached per process;
// pythonRecheck is how long a cached one is used before its first line is
// read again (a freed code object's memory may hold another one later).
const (
	maxPythonCodes = 4096
	pythonRecheck  = 10 * time.Second
)

// pythonProcess is what is cached about the interpreter of one process.
type pythonProcess struct {
	offsets *python.Offsets // nil: no interpreter found
	mem     *os.File        // /proc/<pid>/mem
	err     string          // why there is no offsets or mem
	codes   map[uint64]cachedCode
}

// cachedCode is a code object read, and when its first line was last seen
// unchanged.
type cachedCode struct {
	code    *python.Code
	checked time.Time
}

// Python symbolizes a CPython frame of process pid: the code object at
// code, at instruction (code units). The frame has the function's
// qualified name, its file and the line of the instruction; one that
// cannot be read has no function name and is counted by reason.
func (s *Symbolizer) Python(pid uint32, code uint64, instruction uint32) report.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	frame := report.Frame{Address: code, Type: report.FramePython}
	py := s.pythonProcess(pid, s.process(pid))
	var c *python.Code
	reason := py.err
	if reason == "" {
		var err error
		c, err = s.pythonCode(py, code)
		switch {
		case procfs.RefusalReason(err) != "":
			// The process holds its memory (userfaultfd, a stuck page
			// fault): none of it is read again.
			py.err, reason = PythonMemory, PythonMemory
			s.log.Info("a Python process's memory does not answer; its frames stay unnamed",
				zap.Uint32("pid", pid), zap.Error(err))
		case err != nil:
			reason = PythonBadCode
			if s.once.first(fmt.Sprintf("pycode:%d", pid)) {
				s.log.Debug("cannot read a Python code object", zap.Uint32("pid", pid), zap.Error(err))
			}
		}
	}
	if c == nil {
		s.countPython(reason)
		return frame
	}
	s.countPython("")
	frame.Function = c.QualName
	frame.File = c.File
	frame.Line = int64(c.Line(instruction))
	return frame
}

// countPython counts a Python frame resolved (reason "") or not.
func (s *Symbolizer) countPython(reason string) {
	if reason == "" {
		s.stats.PythonFrames++
		return
	}
	if s.stats.PythonUnsymbolized == nil {
		s.stats.PythonUnsymbolized = map[string]uint64{}
	}
	s.stats.PythonUnsymbolized[reason]++
}

// pythonProcess returns the interpreter state of p, finding it on first use
// among the executable mappings p has.
func (s *Symbolizer) pythonProcess(pid uint32, p *process) *pythonProcess {
	if p.python != nil {
		return p.python
	}
	py := &pythonProcess{err: PythonNoInterpreter}
	p.python = py
	for _, m := range p.maps {
		if !m.FileBacked() || !python.LooksLikePython(m.Path) {
			continue
		}
		ef, _ := s.elf(pid, m)
		if ef == nil {
			continue
		}
		if in := ef.pythonInterpreter(); in != nil {
			py.offsets = &in.Offsets
			break
		}
	}
	if py.offsets == nil {
		return py
	}
	mem, err := os.Open(s.proc.Path(pid, "mem"))
	if err != nil {
		py.err = PythonMemory
		if s.once.first(fmt.Sprintf("pymem:%d", pid)) {
			s.log.Info("cannot read a Python process's memory", zap.Uint32("pid", pid), zap.Error(err))
		}
		return py
	}
	py.mem, py.err = mem, ""
	return py
}

// dropPython closes what p holds of its interpreter.
func dropPython(p *process) {
	if p.python != nil && p.python.mem != nil {
		_ = p.python.mem.Close()
	}
	p.python = nil
}

// pythonCode returns the code object at addr: the cached one while its
// first line is unchanged (checked every pythonRecheck), else read now.
// Reads run under the deadline, off the caller's goroutine.
func (s *Symbolizer) pythonCode(py *pythonProcess, addr uint64) (*python.Code, error) {
	now := s.now()
	cached, ok := py.codes[addr]
	if ok && now.Sub(cached.checked) < pythonRecheck {
		return cached.code, nil
	}
	c, err := procfs.Within(s.deadline, py.mem.Name(), func() (*python.Code, error) {
		if ok && firstLine(py, addr) == cached.code.FirstLine {
			return cached.code, nil
		}
		return py.offsets.ReadCode(py.mem, addr)
	}, nil)
	if err != nil {
		delete(py.codes, addr)
		return nil, err
	}
	if len(py.codes) >= maxPythonCodes || py.codes == nil {
		py.codes = make(map[uint64]cachedCode)
	}
	py.codes[addr] = cachedCode{code: c, checked: now}
	return c, nil
}

// firstLine reads the first line of the code object at addr, or -1.
func firstLine(py *pythonProcess, addr uint64) int {
	var b [4]byte
	if _, err := py.mem.ReadAt(b[:], int64(addr)+int64(py.offsets.CodeFirstLineNo)); err != nil {
		return -1
	}
	return int(int32(binary.NativeEndian.Uint32(b[:])))
}

// pythonInterpreter returns the CPython interpreter in ef, or nil; found
// once per file.
func (ef *elfFile) pythonInterpreter() *python.Interpreter {
	if ef.pythonChecked {
		return ef.python
	}
	ef.pythonChecked = true
	if ef.mapped == nil {
		return nil
	}
	var err error
	if ferr := withFaultPanic(func() {
		var f *elf.File
		if f, err = elf.NewFile(bytes.NewReader(ef.mapped.data)); err == nil {
			ef.python, err = python.Detect(f)
		}
	}); ferr != nil {
		err = ferr
	}
	if err != nil && !errors.Is(err, python.ErrNotPython) {
		ef.pythonErr = err
	}
	return ef.python
}
