package cpython

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is CPython, as internal/runtimes describes a runtime.
var Runtime = &runtimes.Runtime{
	Name:          "cpython",
	ProcMap:       "python_procs",
	ID:            1, // capture.Runtime, bpf/runtimes.h RUNTIME_CPYTHON
	EntryFunction: evalFunction,
	// The executable or libpython, under any name; a static build has
	// it in its own symbol table.
	Exports: []string{symRuntime},
	Static:  true,
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		in, err := Detect(f)
		if errors.Is(err, ErrNotPython) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return in, nil
	},
}

// evalFunction is CPython's native function that runs Python frames
// (3.9 to 3.13); the Python frames of one of its calls end with the frame
// the walk flags as the call's entry.
const evalFunction = "_PyEval_EvalFrameDefault"

// walkerProc is struct python_proc of bpf/cpython.h, what the walk needs
// of one interpreter process; its fields are bpf.CpuPythonProc's.
type walkerProc struct {
	Runtime            uint64 // address of _PyRuntime
	InterpretersHead   uint32
	ThreadsHead        uint32
	ThreadNext         uint32
	ThreadId           uint32
	ThreadFrame        uint32
	CframeCurrentFrame uint32
	FramePrevious      uint32
	FrameCode          uint32
	FrameInstruction   uint32
	FrameOwner         uint32
	CodeAdaptive       uint32
	FrameTlbcIndex     uint32
	CodeTlbc           uint32
	ViaCframe          uint8
	InstructionKind    uint8
	EntryKind          uint8
	Reserved           uint8
}

// WalkerProc is the python_procs entry of a process whose interpreter file
// is loaded with bias bias: where its _PyRuntime is, and the offsets of
// the interpreter's version. It reads nothing of the process.
func (in *Interpreter) WalkerProc(_ io.ReaderAt, bias uint64) ([]byte, error) {
	o := in.Offsets
	p := walkerProc{
		Runtime:            in.RuntimeAddr + bias,
		InterpretersHead:   o.RuntimeInterpretersHead,
		ThreadsHead:        o.InterpThreadsHead,
		ThreadNext:         o.ThreadNext,
		ThreadId:           o.ThreadID,
		ThreadFrame:        o.ThreadFrame,
		CframeCurrentFrame: o.CFrameCurrentFrame,
		FramePrevious:      o.FramePrevious,
		FrameCode:          o.FrameCode,
		FrameInstruction:   o.FrameInstruction,
		FrameOwner:         o.FrameOwner,
		CodeAdaptive:       o.CodeAdaptive,
		FrameTlbcIndex:     o.FrameTLBCIndex,
		CodeTlbc:           o.CodeTLBC,
		InstructionKind:    uint8(o.InstructionKind),
		EntryKind:          uint8(o.EntryKind),
	}
	if o.ThreadFrameViaCFrame {
		p.ViaCframe = 1
	}
	return binary.Append(nil, binary.NativeEndian, &p)
}

// RuntimeVersion is the interpreter's major and minor version, with a t
// for a free-threaded build ("3.14", "3.14t").
func (in *Interpreter) RuntimeVersion() string {
	v := fmt.Sprintf("%d.%d", in.Version.Major, in.Version.Minor)
	if in.Offsets.FreeThreaded {
		v += "t"
	}
	return v
}

// Process returns what names the Python frames of one process running the
// interpreter, reading its memory mem.
func (in *Interpreter) Process(mem io.ReaderAt, _ uint64) runtimes.Process {
	return &process{offsets: &in.Offsets, mem: mem}
}

// maxCodes bounds the code objects cached per process; recheck is how
// long a cached one is used before its first line is read again (a freed
// code object's memory may hold another one later).
const (
	maxCodes = 4096
	recheck  = 10 * time.Second
)

// process is what is cached about the interpreter of one process.
type process struct {
	offsets *Offsets
	mem     io.ReaderAt
	codes   map[uint64]cachedCode
}

// cachedCode is a code object read, and when its first line was last seen
// unchanged.
type cachedCode struct {
	code    *Code
	checked time.Time
}

// Cached names the Python frame of the code object at code, at
// instruction (code units), from the code object read within recheck.
func (p *process) Cached(code uint64, instruction uint32, now time.Time) (runtimes.Frame, bool) {
	cached, ok := p.codes[code]
	if !ok || now.Sub(cached.checked) >= recheck {
		return runtimes.Frame{}, false
	}
	return frameOf(cached.code, instruction), true
}

// Read names the Python frame of the code object at code, at instruction:
// the cached code object while its first line is unchanged, else the one
// read now.
func (p *process) Read(code uint64, instruction uint32, now time.Time) (runtimes.Frame, error) {
	cached, ok := p.codes[code]
	c := cached.code
	if !ok || p.firstLine(code) != c.FirstLine {
		var err error
		if c, err = p.offsets.ReadCode(p.mem, code); err != nil {
			delete(p.codes, code)
			return runtimes.Frame{}, err
		}
	}
	if len(p.codes) >= maxCodes || p.codes == nil {
		p.codes = make(map[uint64]cachedCode)
	}
	p.codes[code] = cachedCode{code: c, checked: now}
	return frameOf(c, instruction), nil
}

// frameOf is the frame of code object c at instruction: the function's
// qualified name, its file and the line of the instruction.
func frameOf(c *Code, instruction uint32) runtimes.Frame {
	return runtimes.Frame{Function: c.QualName, File: c.File, Line: int64(c.Line(instruction))}
}

// firstLine reads the first line of the code object at addr, or -1.
func (p *process) firstLine(addr uint64) int {
	var b [4]byte
	if _, err := p.mem.ReadAt(b[:], int64(addr)+int64(p.offsets.CodeFirstLineNo)); err != nil {
		return -1
	}
	return int(int32(binary.NativeEndian.Uint32(b[:])))
}
