package v8

import (
	"fmt"
	"slices"
	"strings"
)

// ScopeInfoLayout is where a ScopeInfo keeps what the namer reads: the
// function's name and start position. The v8dbg metadata has none of it.
// Header (all versions): map, flags, parameter_count, context_local_count,
// then the variable part from byte 32.
type ScopeInfoLayout struct {
	// FlagsOffset is where the 32-bit flags are: 12 when they are a Smi
	// (upper half of the word at 8), 8 when a plain uint32.
	FlagsOffset uint16
	// PositionFirst: position_info (start, end Smis) comes right after the
	// header (13.x); before, it follows the function name slots and only
	// for the scope types that have it.
	PositionFirst bool
	// Scope type values (flags bits 0..3).
	FunctionScope, ModuleScope, ScriptScope, EvalScope, ClassScope uint32
	// MaxInlinedLocals: from this many context locals on, their names are
	// one hash table slot instead of one slot each.
	MaxInlinedLocals int
}

// Flags bits of ScopeInfo, the same in V8 10.2 to 13.6 (see versionGaps).
const (
	scopeTypeMask          = 0xf
	scopeSavedClassVarBit  = 1 << 10 // has_saved_class_variable
	scopeFunctionVarShift  = 12      // function_variable: 2 bits, 0 = NONE
	scopeInferredNameBit   = 1 << 14 // has_inferred_function_name
	scopeInfoVariablePart  = 32      // first slot after the header
	scopeInfoMaxSlots      = 1 << 16 // bound on locals
	defaultMaxInlinedLocal = 75      // kScopeInfoMaxInlinedLocalNamesSize
)

// gaps are the numbers of one V8 version its v8dbg metadata lacks.
type gaps struct {
	SFIFunctionData         uint16 // used when v8dbg has no SharedFunctionInfo::function_data
	BytecodeSourcePositions uint16
	CodeBytecode            uint16 // used when v8dbg has no Code::bytecode_or_interpreter_data
	InterpreterDataBytecode uint16
	DebugInfoScript         uint16 // 0: DebugInfo is not in the SFI (12.x on)
	ExternalResourceData    uint16
	Scope                   ScopeInfoLayout
}

// versionGaps is keyed by V8 major.minor. Measured on live nodes 18.20.8,
// 20.20.2 (Debian), 22.23.3 and 24.21.0: functions found with %DebugPrint
// (--allow-natives-syntax), their objects read from /proc/PID/mem, each
// field's object checked by its map's instance type; TestLiveNodeNames
// asserts the outcome under each way of running node it lists.
//   - SFIFunctionData (12.4, 13.6; v8dbg has it before): the word at 8
//     held the BytecodeArray, baseline Code or UncompiledData (13.6:
//     trusted_function_data; untrusted_function_data at 16 held Smi -1).
//   - BytecodeSourcePositions: 10.2/11.3 constant_pool(16), handler_table
//     (24), source_position_table(32); 12.4/13.6 wrapper(16),
//     source_position_table(24), handler_table(32): the word held the
//     function's own (Trusted)ByteArray, whose entries decode to what
//     --print-bytecode prints (the live test compares every entry).
//   - CodeBytecode: with --always-sparkplug (10.2, 11.3) or by default
//     (12.4, 13.6) baseline Code held the BytecodeArray at 16 (10.2; 11.3's
//     v8dbg says the same) or 8 (12.4, 13.6).
//   - InterpreterDataBytecode: --interpreted-frames-native-stack gave 10.2
//     and 11.3 SFIs an InterpreterData, BytecodeArray at 8. 12.4 and 13.6
//     kept the BytecodeArray in the SFI (no InterpreterData seen; 8 is
//     V8's layout there too: src/objects/shared-function-info.tq).
//   - DebugInfoScript: after an inspector breakpoint in a function (10.2,
//     11.3) its SFI held a DebugInfo {map, shared, debugger_hints, script}.
//     12.4 on keep DebugInfos in a side table.
//   - ExternalResourceData: ExternalString {map, hash+length, resource,
//     resource_data}: node's own modules (node:fs, node:path) read back
//     their sources, lines equal to what V8 computes.
//   - Scope: flags a Smi at 8 on 10.2..12.4 (spin's 0x171e2: scope type 2
//     = FUNCTION), a uint32 at 8 on 13.6 (0x171e4: FUNCTION = 4); then the
//     name after the locals, position_info (spin: 37, 111) after it, except
//     on 13.6 where position_info is at 32. The bits (see scope* above)
//     decode spin's flags; names found under 0, 2 and 80 context locals
//     (the last: one hash table slot) on all four. Not seen live: a saved
//     class variable (class scopes, which own no function) and 13.6's
//     module_variable_count (module scopes: the module's own code);
//     both from src/objects/scope-info.tq.
var versionGaps = map[[2]int]gaps{
	{10, 2}: {SFIFunctionData: 8, BytecodeSourcePositions: 32, CodeBytecode: 16, InterpreterDataBytecode: 8, DebugInfoScript: 24, ExternalResourceData: 24, Scope: oldScopes},
	{11, 3}: {SFIFunctionData: 8, BytecodeSourcePositions: 32, CodeBytecode: 16, InterpreterDataBytecode: 8, DebugInfoScript: 24, ExternalResourceData: 24, Scope: oldScopes},
	{12, 4}: {SFIFunctionData: 8, BytecodeSourcePositions: 24, CodeBytecode: 8, InterpreterDataBytecode: 8, ExternalResourceData: 24, Scope: oldScopes},
	{13, 6}: {SFIFunctionData: 8, BytecodeSourcePositions: 24, CodeBytecode: 8, InterpreterDataBytecode: 8, ExternalResourceData: 24, Scope: ScopeInfoLayout{
		FlagsOffset: 8, PositionFirst: true, ScriptScope: 0, ClassScope: 2, EvalScope: 3, FunctionScope: 4, ModuleScope: 5,
		MaxInlinedLocals: defaultMaxInlinedLocal,
	}},
}

// oldScopes is ScopeInfo before 13.x: ScopeType CLASS, EVAL, FUNCTION,
// MODULE, SCRIPT, ...
var oldScopes = ScopeInfoLayout{
	FlagsOffset: 12, ClassScope: 0, EvalScope: 1, FunctionScope: 2, ModuleScope: 3, ScriptScope: 4,
	MaxInlinedLocals: defaultMaxInlinedLocal,
}

func gapsFor(major, minor int) (gaps, bool) {
	g, ok := versionGaps[[2]int{major, minor}]
	return g, ok
}

func knownVersions() string {
	var s []string
	for v := range versionGaps {
		s = append(s, fmt.Sprintf("%d.%d", v[0], v[1]))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}
