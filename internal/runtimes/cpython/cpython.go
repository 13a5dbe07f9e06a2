// Package cpython is the CPython runtime (internal/runtimes): it recognises
// a CPython interpreter in an ELF file, gives the struct offsets the BPF
// frame walk (bpf/cpython.h) needs for its version, and turns what the walk
// records per Python frame (a code object's address and the instruction the
// frame is at) into a function name, file name and line by reading the code
// object from the process's memory.
//
// Supported: CPython 3.7 and later, x86-64 and arm64 release builds (not
// free-threaded): 3.7 to 3.12 from a table of offsets, 3.13 and later from
// the _Py_DebugOffsets the interpreter carries (a version newer than the
// newest known is walked when they are consistent).
package cpython

import (
	"errors"
	"fmt"
)

// Version is a CPython version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// InstructionKind says how Offsets.FrameInstruction gives the instruction
// index in code units (2-byte _Py_CODEUNIT).
type InstructionKind uint8

const (
	InstructionByteOffset InstructionKind = iota // 3.9: f_lasti is a byte offset (index = f_lasti/2)
	InstructionIndex                             // 3.10: f_lasti is the index
	InstructionPointer                           // 3.11+: a pointer into co_code_adaptive
)

// EntryKind says how the walk sees where one call of the native
// _PyEval_EvalFrameDefault begins.
type EntryKind uint8

const (
	EntryEveryFrame EntryKind = iota // 3.9/3.10: every frame is its own eval call
	EntryFlag                        // 3.11: is_entry != 0 marks the outermost frame of an eval call
	// EntryShimFrame (3.12+): a frame with owner == FrameOwnedByCStack is a
	// shim pushed by an eval call: skip it; the frame above it (leafward) was
	// the outermost of that call.
	EntryShimFrame
)

// FrameOwnedByCStack is _PyInterpreterFrame.owner of an eval call's shim
// frame: FRAME_OWNED_BY_CSTACK (3) in 3.12 and 3.13, then
// FRAME_OWNED_BY_INTERPRETER (3; CSTACK became 4, unused, and left in
// 3.15): the value the walk tests is 3 throughout.
const FrameOwnedByCStack = 3

// Offsets are byte offsets into CPython's structs for one version (64-bit
// release builds, one layout on x86-64 and arm64). The table is in offsets.go.
type Offsets struct {
	// Version is the interpreter's version; Line picks the line table
	// format by it.
	Version Version

	// The walk (BPF):
	RuntimeInterpretersHead uint32 // _PyRuntimeState.interpreters.head (PyInterpreterState*)
	InterpThreadsHead       uint32 // PyInterpreterState: tstate_head (3.9/3.10), threads.head (3.11+)
	ThreadNext              uint32 // PyThreadState.next
	ThreadID                uint32 // PyThreadState.thread_id (unsigned long, = pthread_self())
	ThreadFrame             uint32 // PyThreadState: frame (3.9/3.10), cframe (3.11/3.12), current_frame (3.13)
	CFrameCurrentFrame      uint32 // _PyCFrame.current_frame (3.11/3.12); meaningful only when ThreadFrameViaCFrame
	ThreadFrameViaCFrame    bool   // 3.11/3.12: ThreadFrame points at a _PyCFrame, follow CFrameCurrentFrame
	FramePrevious           uint32 // PyFrameObject.f_back (3.9/3.10); _PyInterpreterFrame.previous (3.11+)
	FrameCode               uint32 // f_code (3.9-3.12), f_executable (3.13)
	FrameInstruction        uint32 // f_lasti int (3.9/3.10); prev_instr (3.11/3.12) or instr_ptr (3.13) pointer
	InstructionKind         InstructionKind
	FrameOwner              uint32 // _PyInterpreterFrame: is_entry (3.11, bool), owner (3.12+, char); unused 3.9/3.10
	EntryKind               EntryKind
	CodeAdaptive            uint32 // PyCodeObject.co_code_adaptive (3.11+): instruction index = (ptr - code - CodeAdaptive) / 2
	// A free-threaded build's frames point into their thread's copy of the
	// bytecode: entry FrameTLBCIndex (int32) of the code object's CodeTLBC
	// array (_PyCodeArray: size, then pointers; entry 0 is co_code_adaptive).
	FreeThreaded   bool
	FrameTLBCIndex uint32 // _PyInterpreterFrame.tlbc_index
	CodeTLBC       uint32 // PyCodeObject.co_tlbc

	// Symbolization (user space), PyCodeObject:
	CodeFilename    uint32 // co_filename (str)
	CodeName        uint32 // co_name (str)
	CodeQualname    uint32 // co_qualname (str, 3.11+); 0 before
	CodeFirstLineNo uint32 // co_firstlineno (int)
	CodeLineTable   uint32 // co_lnotab (3.9) or co_linetable (3.10+) (bytes)
	CodeCode        uint32 // co_code (bytes, 3.9/3.10), for bounds; 0 from 3.11 (the code object's own ob_size counts code units)
	CodeSize        uint32 // bytes to read for one PyCodeObject header (covers every field above)

	// Objects:
	ObjectType         uint32 // PyObject.ob_type
	TypeName           uint32 // PyTypeObject.tp_name (char*)
	VarObjectSize      uint32 // PyVarObject.ob_size: a bytes object's length; a code object's length in code units (3.11+)
	BytesData          uint32 // PyBytesObject.ob_sval, the first byte
	UnicodeLength      uint32 // PyASCIIObject.length, in characters
	UnicodeState       uint32 // PyASCIIObject.state (bit field, 4 bytes)
	UnicodeASCIIData   uint32 // sizeof(PyASCIIObject): where a compact ASCII string's characters start
	UnicodeCompactData uint32 // sizeof(PyCompactUnicodeObject): where a compact non-ASCII string's characters start
	UnicodeKindShift   uint8  // state >> UnicodeKindShift & 7 is the kind: bytes per character (1, 2, 4)
	UnicodeCompactBit  uint8  // state bit set on compact strings (characters follow the header)
	UnicodeASCIIBit    uint8  // state bit set on ASCII-only strings
}

// Interpreter is CPython found in one ELF file.
type Interpreter struct {
	Version     Version
	RuntimeAddr uint64 // link-time virtual address of _PyRuntime in the file (add the load bias for the process address)
	Offsets     Offsets
	// Untested is set on a version newer than the newest whose
	// _Py_DebugOffsets layout this package knows (read with that layout).
	Untested bool
}

// ErrNotPython means the file is not a CPython interpreter: no _PyRuntime
// (an executable linked to libpython, Python 2, another program).
var ErrNotPython = errors.New("not a CPython interpreter")

// ErrUnsupported wraps the error of an interpreter this package cannot
// walk; the message names the version or the kind of build.
var ErrUnsupported = errors.New("unsupported CPython")
