package cpython

// Every number below was read with gdb from the DWARF of a pyenv release
// build of libpython (x86-64): `ptype /o <struct>` for layouts and
// `print (long)&((T*)0)->field` for nested fields. Each entry names the
// build it was read from; the layouts do not change between patch releases
// of a minor version.

// objectLayout is the part of PyObject, PyVarObject, PyTypeObject,
// PyBytesObject and PyASCIIObject the symbolizer reads; the same from 3.9 to
// 3.13 but for the size of PyASCIIObject, which lost wstr in 3.12.
func objectLayout(o Offsets, asciiSize, compactSize uint32) Offsets {
	o.ObjectType = 8     // PyObject.ob_type
	o.TypeName = 24      // PyTypeObject.tp_name
	o.VarObjectSize = 16 // PyVarObject.ob_size
	o.BytesData = 32     // PyBytesObject.ob_sval
	o.UnicodeLength = 16 // PyASCIIObject.length
	o.UnicodeState = 32  // PyASCIIObject.state: interned:2, kind:3, compact:1, ascii:1, ...
	o.UnicodeKindShift = 2
	o.UnicodeCompactBit = 5
	o.UnicodeASCIIBit = 6
	o.UnicodeASCIIData = asciiSize
	o.UnicodeCompactData = compactSize
	return o
}

// freeThreadedObjects moves the offsets objectLayout gives past the larger
// PyObject header of a free-threaded build of 3.<minor> (ob_tid, ob_flags
// or 3.13's padding, ob_mutex, ob_gc_bits, ob_ref_local and ob_ref_shared
// before ob_type: 32 bytes instead of 16). From 3.14 on its
// PyASCIIObject.state opens with a whole byte for interned, where 3.13t
// keeps the two bits (Include/object.h, Include/cpython/unicodeobject.h).
func freeThreadedObjects(o Offsets, minor int) Offsets {
	const grown = 16
	for _, f := range []*uint32{&o.ObjectType, &o.TypeName, &o.VarObjectSize, &o.BytesData,
		&o.UnicodeLength, &o.UnicodeState, &o.UnicodeASCIIData, &o.UnicodeCompactData} {
		*f += grown
	}
	if minor >= 14 {
		o.UnicodeKindShift = 8
		o.UnicodeCompactBit = 11
		o.UnicodeASCIIBit = 12
	}
	return o
}

// offsetsByMinor holds the offsets of CPython 3.<minor> before 3.13; from
// 3.13 on they come from the interpreter's own _Py_DebugOffsets
// (debugoffsets.go).
var offsetsByMinor = map[int]Offsets{
	// 3.7.16: struct pyruntimestate, struct _is, struct _ts, struct _frame,
	// PyCodeObject; sizeof(PyASCIIObject) 48, sizeof(PyCompactUnicodeObject)
	// 72. f_lasti and co_lnotab as in 3.9.
	7: objectLayout(Offsets{
		RuntimeInterpretersHead: 24,  // pyruntimestate.interpreters.head
		InterpThreadsHead:       8,   // _is.tstate_head
		ThreadNext:              8,   // _ts.next
		ThreadID:                176, // _ts.thread_id
		ThreadFrame:             24,  // _ts.frame
		FramePrevious:           24,  // _frame.f_back
		FrameCode:               32,  // _frame.f_code
		FrameInstruction:        104, // _frame.f_lasti (int, bytes)
		InstructionKind:         InstructionByteOffset,
		EntryKind:               EntryEveryFrame,
		CodeFilename:            96,  // co_filename
		CodeName:                104, // co_name
		CodeFirstLineNo:         36,  // co_firstlineno
		CodeLineTable:           112, // co_lnotab
		CodeCode:                40,  // co_code
		CodeSize:                144, // sizeof(PyCodeObject)
	}, 48, 72),

	// 3.8.18: the same structs as 3.9 at the same offsets (3.8's code
	// object gained co_posonlyargcount, 3.9's frame nothing the walk reads).
	8: offsets39,
	9: offsets39,

	// 3.10.13: the same structs as 3.9; f_lasti counts code units and
	// co_linetable replaces co_lnotab.
	10: objectLayout(Offsets{
		RuntimeInterpretersHead: 32,  // pyruntimestate.interpreters.head
		InterpThreadsHead:       8,   // _is.tstate_head
		ThreadNext:              8,   // _ts.next
		ThreadID:                176, // _ts.thread_id
		ThreadFrame:             24,  // _ts.frame
		FramePrevious:           24,  // _frame.f_back
		FrameCode:               32,  // _frame.f_code
		FrameInstruction:        96,  // _frame.f_lasti (int, code units)
		InstructionKind:         InstructionIndex,
		EntryKind:               EntryEveryFrame,
		CodeFilename:            104, // co_filename
		CodeName:                112, // co_name
		CodeFirstLineNo:         40,  // co_firstlineno
		CodeLineTable:           120, // co_linetable
		CodeCode:                48,  // co_code
		CodeSize:                176, // sizeof(PyCodeObject)
	}, 48, 72),

	// 3.11.7: struct pyruntimestate, struct _is, struct _ts, _PyCFrame,
	// _PyInterpreterFrame, PyCodeObject; sizeof(PyASCIIObject) 48,
	// sizeof(PyCompactUnicodeObject) 72.
	11: objectLayout(Offsets{
		RuntimeInterpretersHead: 40,  // pyruntimestate.interpreters.head
		InterpThreadsHead:       16,  // _is.threads.head
		ThreadNext:              8,   // _ts.next
		ThreadID:                152, // _ts.thread_id
		ThreadFrame:             56,  // _ts.cframe
		CFrameCurrentFrame:      8,   // _PyCFrame.current_frame
		ThreadFrameViaCFrame:    true,
		FramePrevious:           48, // _PyInterpreterFrame.previous
		FrameCode:               32, // _PyInterpreterFrame.f_code
		FrameInstruction:        56, // _PyInterpreterFrame.prev_instr
		InstructionKind:         InstructionPointer,
		FrameOwner:              68, // _PyInterpreterFrame.is_entry
		EntryKind:               EntryFlag,
		CodeAdaptive:            184, // co_code_adaptive
		CodeFilename:            112, // co_filename
		CodeName:                120, // co_name
		CodeQualname:            128, // co_qualname
		CodeFirstLineNo:         72,  // co_firstlineno
		CodeLineTable:           136, // co_linetable
		CodeSize:                184, // up to co_code_adaptive
	}, 48, 72),

	// 3.12.1: the same structs as 3.11; _PyInterpreterFrame reordered,
	// is_entry gone (owner marks the shim frame); sizeof(PyASCIIObject) 40,
	// sizeof(PyCompactUnicodeObject) 56.
	12: objectLayout(Offsets{
		RuntimeInterpretersHead: 40,  // pyruntimestate.interpreters.head
		InterpThreadsHead:       72,  // _is.threads.head
		ThreadNext:              8,   // _ts.next
		ThreadID:                136, // _ts.thread_id
		ThreadFrame:             56,  // _ts.cframe
		CFrameCurrentFrame:      0,   // _PyCFrame.current_frame
		ThreadFrameViaCFrame:    true,
		FramePrevious:           8,  // _PyInterpreterFrame.previous
		FrameCode:               0,  // _PyInterpreterFrame.f_code
		FrameInstruction:        56, // _PyInterpreterFrame.prev_instr
		InstructionKind:         InstructionPointer,
		FrameOwner:              70, // _PyInterpreterFrame.owner
		EntryKind:               EntryShimFrame,
		CodeAdaptive:            192, // co_code_adaptive
		CodeFilename:            112, // co_filename
		CodeName:                120, // co_name
		CodeQualname:            128, // co_qualname
		CodeFirstLineNo:         68,  // co_firstlineno
		CodeLineTable:           136, // co_linetable
		CodeSize:                192, // up to co_code_adaptive
	}, 40, 56),
}

// offsets39 are the offsets of 3.8 and 3.9.
// 3.9.18: struct pyruntimestate, struct _is, struct _ts, struct _frame
// (PyFrameObject), PyCodeObject; sizeof(PyASCIIObject) 48,
// sizeof(PyCompactUnicodeObject) 72.
var offsets39 = objectLayout(Offsets{
	RuntimeInterpretersHead: 32,  // pyruntimestate.interpreters.head
	InterpThreadsHead:       8,   // _is.tstate_head
	ThreadNext:              8,   // _ts.next
	ThreadID:                176, // _ts.thread_id
	ThreadFrame:             24,  // _ts.frame
	FramePrevious:           24,  // _frame.f_back
	FrameCode:               32,  // _frame.f_code
	FrameInstruction:        104, // _frame.f_lasti (int, bytes)
	InstructionKind:         InstructionByteOffset,
	EntryKind:               EntryEveryFrame,
	CodeFilename:            104, // co_filename
	CodeName:                112, // co_name
	CodeFirstLineNo:         40,  // co_firstlineno
	CodeLineTable:           120, // co_lnotab
	CodeCode:                48,  // co_code
	CodeSize:                176, // sizeof(PyCodeObject)
}, 48, 72)

// offsetsFor returns the offsets of version v.
func offsetsFor(v Version) (Offsets, bool) {
	if v.Major != 3 {
		return Offsets{}, false
	}
	o, ok := offsetsByMinor[v.Minor]
	o.Version = v
	return o, ok
}
