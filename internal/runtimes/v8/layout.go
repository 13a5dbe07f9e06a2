package v8

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
)

// Layout is what the walker and namer need of one V8 build: offsets (bytes)
// of fields in objects, instance types and frame slots, read from the
// post-mortem metadata (v8dbg_* symbols) the build exports, and for what
// that lacks, from gaps.go.
type Layout struct {
	Major, Minor int

	// Frame slots, bytes from a frame's fp (v8dbg_off_fp_*).
	FPMarker, FPFunction, FPBytecodeArray, FPBytecodeOffset int16

	FunctionShared  uint16 // JSFunction::shared
	MapInstanceType uint16 // Map::instance_type (u16)
	// BytecodeArrayHeader is where a BytecodeArray's bytecodes start: an
	// interpreted frame's bytecode offset slot holds Smi(offset + header - 1).
	BytecodeArrayHeader uint16

	TypeSharedFunctionInfo, TypeBytecodeArray uint16 // instance types

	HeapObjectMap uint16 // HeapObject::map

	// SharedFunctionInfo fields.
	SFIFunctionData, SFINameOrScopeInfo, SFIScript uint16

	// Script fields.
	ScriptSource, ScriptName, ScriptLineEnds uint16

	// FixedArray (FixedArrayBase) length (a Smi) and first element; byte
	// arrays (source position tables) share the layout.
	ArrayLength, ArrayData uint16

	BytecodeSourcePositions uint16 // BytecodeArray::source_position_table
	CodeBytecode            uint16 // baseline Code → its BytecodeArray (or InterpreterData)
	InterpreterDataBytecode uint16 // InterpreterData::bytecode_array
	DebugInfoScript         uint16 // DebugInfo::script; 0: SFIs never hold a DebugInfo
	UncompiledStart         uint16 // UncompiledData::start_position (int32)

	// Strings.
	StringLength                                     uint16 // String::length (int32)
	SeqChars                                         uint16 // chars of a sequential string
	ConsFirst, ConsSecond                            uint16
	ThinActual                                       uint16
	SlicedParent, SlicedOffset                       uint16
	ExternalResourceData                             uint16 // cached data pointer of an external string
	FirstNonstringType                               uint16
	StringRepresentationMask, StringEncMask          uint16
	OneByteTag                                       uint16
	SeqTag, ConsTag, ExternalTag, SlicedTag, ThinTag uint16

	// Instance types.
	TypeScopeInfo, TypeScript, TypeFixedArray, TypeCode, TypeInterpreterData uint16
	TypeDebugInfo                                                            uint16   // 0: none
	TypePositionTables                                                       []uint16 // (Trusted)ByteArray
	TypeUncompiled                                                           []uint16

	Scope ScopeInfoLayout

	// Code is how compiled code is found from a pc (HasCode: known for
	// this version); without it compiled frames are named by function.
	Code    CodeLayout
	HasCode bool
}

// Supported V8 majors: node 18 (10.2) to node 24 (13.6).
const minMajor, maxMajor = 10, 13

// ErrNoV8 says a file exports no V8 post-mortem metadata.
var ErrNoV8 = errors.New("no V8 post-mortem metadata (v8dbg_* symbols)")

// ReadLayout reads the layout of the V8 in f: ErrNoV8 when f exports no
// v8dbg_* symbols, an error naming the version or the missing numbers when
// it cannot be walked.
func ReadLayout(f *elf.File) (*Layout, error) {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Prefixes: []string{"v8dbg_", "_ZN2v88internal7Version6m"}})
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, ErrNoV8
	}
	if err != nil {
		return nil, fmt.Errorf("V8 post-mortem metadata: %w", err)
	}
	d := dbgSymbols{}
	for _, s := range syms {
		if v, ok := readInt32(f, s.Symbol); ok {
			d[trimDbg(s.Name)] = v
		}
	}
	if len(d) == 0 {
		return nil, ErrNoV8
	}
	l, err := layoutFrom(d)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// layoutFrom makes the layout of the V8 whose metadata is d.
func layoutFrom(d dbgSymbols) (*Layout, error) {
	major, okMaj := d[symMajor]
	minor, okMin := d[symMinor]
	if !okMaj || !okMin {
		return nil, errors.New("V8 without its version (v8::internal::Version::major_, minor_)")
	}
	if major < minMajor || major > maxMajor || minor < 0 || minor > 99 {
		return nil, fmt.Errorf("V8 %d.%d: only V8 %d to %d (node 18 to 24) are supported", major, minor, minMajor, maxMajor)
	}
	g, ok := gapsFor(int(major), int(minor))
	if !ok {
		return nil, fmt.Errorf("V8 %d.%d: no layout known for this version (known: %s)", major, minor, knownVersions())
	}
	l := &Layout{Major: int(major), Minor: int(minor), Scope: g.Scope}
	r := &reader{d: d}
	l.FPMarker = r.fp("off_fp_context_or_frame_type")
	l.FPFunction = r.fp("off_fp_function")
	l.FPBytecodeArray = r.fp("off_fp_bytecode_array")
	l.FPBytecodeOffset = r.fp("off_fp_bytecode_offset")

	l.HeapObjectMap = r.field("HeapObject", "map")
	l.FunctionShared = r.field("JSFunction", "shared")
	l.MapInstanceType = r.field("Map", "instance_type")
	l.BytecodeArrayHeader = r.field("BytecodeArray", "data")
	l.SFINameOrScopeInfo = r.field("SharedFunctionInfo", "name_or_scope_info")
	l.SFIScript = r.field("SharedFunctionInfo", "script_or_debug_info", "script", "raw_script")
	l.SFIFunctionData = r.fieldOr(g.SFIFunctionData, "SharedFunctionInfo", "function_data")
	l.ScriptSource = r.field("Script", "source")
	l.ScriptName = r.field("Script", "name")
	l.ScriptLineEnds = r.field("Script", "line_ends")
	l.ArrayLength = r.field("FixedArrayBase", "length")
	l.ArrayData = r.field("FixedArray", "data")
	l.BytecodeSourcePositions = g.BytecodeSourcePositions
	l.CodeBytecode = r.fieldOr(g.CodeBytecode, "Code", "bytecode_or_interpreter_data")
	l.InterpreterDataBytecode = g.InterpreterDataBytecode
	l.DebugInfoScript = g.DebugInfoScript
	l.UncompiledStart = r.field("UncompiledData", "start_position")

	l.StringLength = r.field("String", "length")
	l.SeqChars = r.field("SeqOneByteString", "chars")
	if two := r.field("SeqTwoByteString", "chars"); two != l.SeqChars {
		r.fail("SeqTwoByteString::chars differs from SeqOneByteString::chars")
	}
	l.ConsFirst = r.field("ConsString", "first")
	l.ConsSecond = r.field("ConsString", "second")
	l.ThinActual = r.field("ThinString", "actual")
	l.SlicedParent = r.field("SlicedString", "parent")
	l.SlicedOffset = r.field("SlicedString", "offset")
	l.ExternalResourceData = g.ExternalResourceData
	l.FirstNonstringType = r.u16("FirstNonstringType")
	l.StringRepresentationMask = r.u16("StringRepresentationMask")
	l.StringEncMask = r.u16("StringEncodingMask")
	l.OneByteTag = r.u16("OneByteStringTag")
	l.SeqTag = r.u16("SeqStringTag")
	l.ConsTag = r.u16("ConsStringTag")
	l.ExternalTag = r.u16("ExternalStringTag")
	l.SlicedTag = r.u16("SlicedStringTag")
	l.ThinTag = r.u16("ThinStringTag")

	l.TypeSharedFunctionInfo = r.typ("SharedFunctionInfo")
	l.TypeBytecodeArray = r.typ("BytecodeArray")
	l.TypeScopeInfo = r.typ("ScopeInfo")
	l.TypeScript = r.typ("Script")
	l.TypeFixedArray = r.typ("FixedArray")
	l.TypeCode = r.typ("Code")
	l.TypeInterpreterData = r.typ("InterpreterData")
	if l.DebugInfoScript != 0 {
		l.TypeDebugInfo = r.typ("DebugInfo")
	}
	for _, c := range []string{"ByteArray", "TrustedByteArray"} {
		if v, ok := r.typeOf(c); ok {
			l.TypePositionTables = append(l.TypePositionTables, v)
		}
	}
	if len(l.TypePositionTables) == 0 {
		r.fail("type ByteArray")
	}
	for k, v := range d {
		if strings.HasPrefix(k, "type_UncompiledData") {
			l.TypeUncompiled = append(l.TypeUncompiled, r.check(k, v, 0xffff))
		}
	}
	if len(l.TypeUncompiled) == 0 {
		r.fail("type UncompiledData*")
	}
	if err := r.err(); err != nil {
		return nil, fmt.Errorf("V8 %d.%d: %w", major, minor, err)
	}
	l.Code, l.HasCode = readCodeLayout(r, int(major), int(minor))
	slices.Sort(l.TypePositionTables)
	slices.Sort(l.TypeUncompiled)
	return l, nil
}

// The symbols of V8's version.
const (
	symMajor = "_ZN2v88internal7Version6major_E"
	symMinor = "_ZN2v88internal7Version6minor_E"
)

func trimDbg(name string) string { return strings.TrimPrefix(name, "v8dbg_") }

// dbgSymbols are the v8dbg_ values by name without the prefix, and the
// version's.
type dbgSymbols map[string]int64

// readInt32 reads the 4-byte int symbol s holds in f's section data; a
// symbol in .bss is 0.
func readInt32(f *elf.File, s elf.Symbol) (int64, bool) {
	if s.Size != 4 || int(s.Section) >= len(f.Sections) || s.Section == elf.SHN_UNDEF {
		return 0, false
	}
	sec := f.Sections[s.Section]
	if s.Value < sec.Addr || s.Value+4 > sec.Addr+sec.Size {
		return 0, false
	}
	if sec.Type == elf.SHT_NOBITS {
		return 0, true
	}
	b := make([]byte, 4)
	if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
		return 0, false
	}
	return int64(int32(binary.LittleEndian.Uint32(b))), true
}

// reader takes values from dbgSymbols, validating their range, and
// remembers what was missing or out of range.
type reader struct {
	d       dbgSymbols
	missing []string
}

func (r *reader) fail(what string) { r.missing = append(r.missing, what) }

func (r *reader) err() error {
	if len(r.missing) == 0 {
		return nil
	}
	slices.Sort(r.missing)
	return fmt.Errorf("missing or invalid post-mortem metadata: %s", strings.Join(r.missing, ", "))
}

func (r *reader) check(name string, v, max int64) uint16 {
	if v < 0 || v > max {
		r.fail(fmt.Sprintf("%s=%d", name, v))
		return 0
	}
	return uint16(v)
}

func (r *reader) u16(name string) uint16 {
	v, ok := r.d[name]
	if !ok {
		r.fail(name)
		return 0
	}
	return r.check(name, v, 0xffff)
}

// fp reads a frame slot: within 256 bytes of fp, word-aligned.
func (r *reader) fp(name string) int16 {
	v, ok := r.d[name]
	if !ok || v < -256 || v > 256 || v%8 != 0 {
		r.fail(name)
		return 0
	}
	return int16(v)
}

// lookupField finds class_CLASS__FIELD__TYPE for the first of fields
// present, whatever its type suffix.
func (r *reader) lookupField(class string, fields ...string) (int64, bool) {
	for _, f := range fields {
		prefix := "class_" + class + "__" + f + "__"
		for k, v := range r.d {
			if strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "__") {
				return v, true
			}
		}
	}
	return 0, false
}

// maxField bounds field offsets: the objects read are small.
const maxField = 512

func (r *reader) field(class string, fields ...string) uint16 {
	v, ok := r.lookupField(class, fields...)
	if !ok {
		r.fail(class + "::" + strings.Join(fields, "|"))
		return 0
	}
	return r.check(class+"::"+fields[0], v, maxField)
}

// fieldOr reads a field, or takes gap when the metadata lacks it (gap 0:
// required).
func (r *reader) fieldOr(gap uint16, class string, fields ...string) uint16 {
	if v, ok := r.lookupField(class, fields...); ok {
		return r.check(class+"::"+fields[0], v, maxField)
	}
	if gap == 0 {
		r.fail(class + "::" + strings.Join(fields, "|"))
	}
	return gap
}

// typeOf finds type_CLASS__NAME_TYPE.
func (r *reader) typeOf(class string) (uint16, bool) {
	prefix := "type_" + class + "__"
	for k, v := range r.d {
		if strings.HasPrefix(k, prefix) && v > 0 && v <= 0xffff {
			return uint16(v), true
		}
	}
	return 0, false
}

func (r *reader) typ(class string) uint16 {
	v, ok := r.typeOf(class)
	if !ok {
		r.fail("type " + class)
	}
	return v
}
