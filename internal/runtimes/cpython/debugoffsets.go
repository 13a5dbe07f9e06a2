package cpython

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// From 3.13 on, _PyRuntime opens with _Py_DebugOffsets: the cookie
// "xdebugpy", PY_VERSION_HEX, free_threaded, then one group of uint64
// offsets per CPython struct, most groups opening with that struct's size
// (Include/internal/pycore_runtime.h in 3.13,
// Include/internal/pycore_debug_offsets.h from 3.14). The groups grow
// between minor versions, so where a field is depends on the version:
// debugLayouts lists them per minor, read from the headers of 3.13.0
// (pyenv), 3.14.10 and 3.15.2 (Debian's libpython3.x-dev).
const (
	debugCookie         = "xdebugpy"
	debugVersionAt      = 8
	debugFreeThreadedAt = 16
	debugGroupsAt       = 24
	// maxStructSize bounds a struct size the block gives (_PyRuntimeState,
	// the largest, is under 1 MiB).
	maxStructSize = 1 << 24
)

// Groups of _Py_DebugOffsets, "name: field field ...", as more than one
// version has them.
const (
	dbgRuntime    = "runtime_state: size finalizing interpreters_head"
	dbgInterp314  = "interpreter_state: size id next threads_head threads_main gc imports_modules sysdict builtins ceval_gil gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked gil_runtime_state_holder code_object_generation tlbc_generation"
	dbgThread313  = "thread_state: size prev next interp current_frame thread_id native_thread_id datastack_chunk status"
	dbgFrame314   = "interpreter_frame: size previous executable instr_ptr localsplus owner stackpointer tlbc_index"
	dbgCode314    = "code_object: size filename name qualname linetable firstlineno argcount localsplusnames localspluskinds co_code_adaptive co_tlbc"
	dbgObject     = "pyobject: size ob_type"
	dbgTuple      = "tuple_object: size ob_item ob_size"
	dbgList       = "list_object: size ob_item ob_size"
	dbgSet        = "set_object: size used table mask"
	dbgDict       = "dict_object: size ma_keys ma_values"
	dbgFloat      = "float_object: size ob_fval"
	dbgLong       = "long_object: size lv_tag ob_digit"
	dbgBytes      = "bytes_object: size ob_size ob_sval"
	dbgGen        = "gen_object: size gi_name gi_iframe gi_frame_state"
	dbgListNode   = "llist_node: next prev"
	dbgDebugger   = "debugger_support: eval_breaker remote_debugger_support remote_debugging_enabled debugger_pending_call debugger_script_path debugger_script_path_size"
	dbgType313    = "type_object: size tp_name tp_repr tp_flags"
	dbgUnicode313 = "unicode_object: size state length asciiobject_size"
	dbgGC313      = "gc: size collecting"
)

// debugLayouts are the groups of _Py_DebugOffsets after its header, in
// order, by minor version.
var debugLayouts = map[int][]string{
	13: {
		dbgRuntime,
		"interpreter_state: size id next threads_head gc imports_modules sysdict builtins ceval_gil gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked gil_runtime_state_holder",
		dbgThread313,
		"interpreter_frame: size previous executable instr_ptr localsplus owner",
		"code_object: size filename name qualname linetable firstlineno argcount localsplusnames localspluskinds co_code_adaptive",
		dbgObject, dbgType313, dbgTuple, dbgList, dbgDict, dbgFloat, dbgLong, dbgBytes, dbgUnicode313, dbgGC313,
	},
	14: {
		dbgRuntime, dbgInterp314, dbgThread313, dbgFrame314, dbgCode314,
		dbgObject, dbgType313, dbgTuple, dbgList, dbgSet, dbgDict, dbgFloat, dbgLong, dbgBytes, dbgUnicode313, dbgGC313,
		dbgGen, dbgListNode, dbgDebugger,
	},
	15: {
		dbgRuntime, dbgInterp314,
		"thread_state: size prev next interp current_frame base_frame last_profiled_frame last_profiled_frame_seq thread_id native_thread_id datastack_chunk status holds_gil gil_requested current_exception exc_state",
		"err_stackitem: exc_value",
		dbgFrame314, dbgCode314, dbgObject,
		"type_object: size tp_name tp_repr tp_flags tp_basicsize tp_dictoffset",
		"heap_type_object: size ht_cached_keys",
		dbgTuple, dbgList, dbgSet, dbgDict, dbgFloat, dbgLong, dbgBytes,
		"unicode_object: size state length asciiobject_size compactunicodeobject_size",
		"gc: size collecting frame generation_stats_size generation_stats",
		dbgGen, dbgListNode, dbgDebugger,
	},
}

// newestDebugLayout is the newest minor version debugLayouts knows: a newer
// interpreter is read with its layout and walked when what it reads is
// consistent (checkDebugOffsets).
const newestDebugLayout = 15

// debugPositions returns where each "group.field" of the layout of minor
// is in _Py_DebugOffsets, and the size of the block.
func debugPositions(minor int) (map[string]int, int) {
	pos := map[string]int{}
	at := debugGroupsAt
	for _, g := range debugLayouts[minor] {
		name, fields, _ := strings.Cut(g, ":")
		for _, f := range strings.Fields(fields) {
			pos[name+"."+f] = at
			at += 8
		}
	}
	return pos, at
}

// debugLayoutOf returns the layout minor is read with, and whether it is a
// layout of that very version.
func debugLayoutOf(minor int) (int, bool) {
	if _, ok := debugLayouts[minor]; ok {
		return minor, true
	}
	return newestDebugLayout, false
}

// debugBlockSize is the most bytes a layout reads from _PyRuntime.
func debugBlockSize(minor int) int {
	layout, _ := debugLayoutOf(minor)
	_, n := debugPositions(layout)
	return n
}

// offsetsFromDebug returns the offsets of interpreter v from the
// _Py_DebugOffsets in b, refusing a block that is not consistent
// (ErrUnsupported, naming what is wrong): every offset is then inside its
// struct, aligned, and the object layouts are the stable ABI's, so a field
// the layout misplaces (a newer version) is not read through.
func offsetsFromDebug(v Version, b []byte, runtimeSize uint64) (Offsets, error) {
	layout, _ := debugLayoutOf(v.Minor)
	pos, n := debugPositions(layout)
	if len(b) < n {
		return Offsets{}, fmt.Errorf("%w %s: _Py_DebugOffsets cut short (%d of %d bytes)", ErrUnsupported, v, len(b), n)
	}
	if string(b[:len(debugCookie)]) != debugCookie {
		return Offsets{}, fmt.Errorf("%w %s: _PyRuntime does not start with the %q cookie", ErrUnsupported, v, debugCookie)
	}
	word := func(at int) uint64 { return binary.LittleEndian.Uint64(b[at:]) }
	if hex := word(debugVersionAt); hex>>16 != uint64(v.Major<<8|v.Minor) {
		return Offsets{}, fmt.Errorf("%w %s: _Py_DebugOffsets version %#x differs", ErrUnsupported, v, hex)
	}
	freeThreaded := word(debugFreeThreadedAt) != 0
	d := debugValues{get: func(name string) uint64 { return word(pos[name]) }}
	o := Offsets{
		Version:                 v,
		RuntimeInterpretersHead: d.field("runtime_state", "interpreters_head", 8),
		InterpThreadsHead:       d.field("interpreter_state", "threads_head", 8),
		ThreadNext:              d.field("thread_state", "next", 8),
		ThreadFrame:             d.field("thread_state", "current_frame", 8),
		ThreadID:                d.field("thread_state", "thread_id", 8),
		FramePrevious:           d.field("interpreter_frame", "previous", 8),
		FrameCode:               d.field("interpreter_frame", "executable", 8),
		FrameInstruction:        d.field("interpreter_frame", "instr_ptr", 8),
		InstructionKind:         InstructionPointer,
		FrameOwner:              d.field("interpreter_frame", "owner", 1),
		EntryKind:               EntryShimFrame,
		CodeFilename:            d.field("code_object", "filename", 8),
		CodeName:                d.field("code_object", "name", 8),
		CodeQualname:            d.field("code_object", "qualname", 8),
		CodeLineTable:           d.field("code_object", "linetable", 8),
		CodeFirstLineNo:         d.field("code_object", "firstlineno", 4),
		CodeAdaptive:            d.field("code_object", "co_code_adaptive", 2),
	}
	o.CodeSize = o.CodeAdaptive // the header ends where the bytecode starts
	if runtimeSize != 0 && d.get("runtime_state.size") != runtimeSize {
		d.fail("runtime_state.size is %d, the _PyRuntime symbol %d bytes", d.get("runtime_state.size"), runtimeSize)
	}
	// The object headers are the stable ABI's (64-bit, with the GIL, or
	// their free-threaded form): what differs from it is a misread block.
	o = objectLayout(o, 40, 56)
	if freeThreaded {
		o = freeThreadedObjects(o, v.Minor)
		o.FreeThreaded = true
		// Each thread runs its own copy of the bytecode from 3.14 on
		// (3.13t shares co_code_adaptive, and its block has no such fields).
		if _, ok := pos["code_object.co_tlbc"]; ok {
			o.FrameTLBCIndex = d.field("interpreter_frame", "tlbc_index", 4)
			o.CodeTLBC = d.field("code_object", "co_tlbc", 8)
		}
	}
	for name, want := range map[string]uint64{
		"pyobject.ob_type":                         uint64(o.ObjectType),
		"type_object.tp_name":                      uint64(o.TypeName),
		"bytes_object.ob_size":                     uint64(o.VarObjectSize),
		"bytes_object.ob_sval":                     uint64(o.BytesData),
		"unicode_object.state":                     uint64(o.UnicodeState),
		"unicode_object.length":                    uint64(o.UnicodeLength),
		"unicode_object.asciiobject_size":          uint64(o.UnicodeASCIIData),
		"unicode_object.compactunicodeobject_size": uint64(o.UnicodeCompactData),
	} {
		if _, ok := pos[name]; ok && d.get(name) != want {
			d.fail("%s is %d, not %d", name, d.get(name), want)
		}
	}
	if d.err != "" {
		return Offsets{}, fmt.Errorf("%w %s: inconsistent _Py_DebugOffsets: %s", ErrUnsupported, v, d.err)
	}
	if !o.codeHeaderCovers() {
		return Offsets{}, fmt.Errorf("%w %s: code object fields beyond co_code_adaptive in _Py_DebugOffsets", ErrUnsupported, v)
	}
	return o, nil
}

// debugValues reads fields of a _Py_DebugOffsets block, keeping the first
// inconsistency found.
type debugValues struct {
	get func(name string) uint64
	err string
}

func (d *debugValues) fail(format string, args ...any) {
	if d.err == "" {
		d.err = fmt.Sprintf(format, args...)
	}
}

// field returns the offset of group.name: aligned to align and, with the
// field's width, inside the struct (the group's size).
func (d *debugValues) field(group, name string, align uint64) uint32 {
	v, size := d.get(group+"."+name), d.get(group+".size")
	switch {
	case size > maxStructSize:
		d.fail("%s.size is %d", group, size)
	case v%align != 0:
		d.fail("%s.%s is %d, not a multiple of %d", group, name, v, align)
	case v+align > size:
		d.fail("%s.%s is %d, past the struct's %d bytes", group, name, v, size)
	}
	return uint32(v)
}
