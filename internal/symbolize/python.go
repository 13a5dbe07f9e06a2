package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

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

// maxPythonCodes bounds the code objects cached per process.
const maxPythonCodes = 4096

// pythonProcess is what is cached about the interpreter of one process.
type pythonProcess struct {
	offsets *python.Offsets // nil: no interpreter found
	mem     *os.File        // /proc/<pid>/mem
	err     string          // why there is no offsets or mem
	codes   map[uint64]*python.Code
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
		c, err = procfs.Within(s.deadline, py.mem.Name(), func() (*python.Code, error) { return py.code(code) }, nil)
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

// code returns the code object at addr, cached while its first line is
// unchanged (a freed code object's memory may hold another one later). It
// runs under the deadline, off the caller's goroutine: a call that times
// out sets py.err, after which nothing reads py.codes but that call.
func (py *pythonProcess) code(addr uint64) (*python.Code, error) {
	if c, ok := py.codes[addr]; ok {
		var b [4]byte
		if _, err := py.mem.ReadAt(b[:], int64(addr)+int64(py.offsets.CodeFirstLineNo)); err == nil &&
			int(int32(binary.NativeEndian.Uint32(b[:]))) == c.FirstLine {
			return c, nil
		}
		delete(py.codes, addr)
	}
	c, err := py.offsets.ReadCode(py.mem, addr)
	if err != nil {
		return nil, err
	}
	if len(py.codes) >= maxPythonCodes || py.codes == nil {
		py.codes = make(map[uint64]*python.Code)
	}
	py.codes[addr] = c
	return c, nil
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
