package v8

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// positionUnknown is the position of an interpreted frame whose bytecode
// offset the walker could not tell.
const positionUnknown = 0xffff

// anonymous names a function without a name.
const anonymous = "<anonymous>"

// Bounds of what a namer keeps.
const (
	maxScripts       = 256
	maxLineEndsArray = 1 << 20 // lines of a script whose line ends V8 computed
)

// Namer names the JavaScript frames of one node process from its memory:
// a frame is its function's SharedFunctionInfo (tagged) and a position
// (0: compiled code; bytecode offset + 1 in an interpreted frame). Not safe
// for concurrent use.
type Namer struct {
	h       heap
	scripts map[uint64]*script // by the Script's tagged address
	codes   *codes             // nil: compiled code is not read
}

// script is a Script's name and line ends, read once: its source is
// checked again after recheck (an address may be reused after a GC).
type script struct {
	name   string
	source uint64  // the source string the ends were read from
	length int     // and its length
	ends   []int32 // nil: no lines
	at     time.Time
}

// NewNamer names the frames of the process whose memory is mem, for the
// V8 of layout l.
func NewNamer(mem io.ReaderAt, l *Layout) *Namer {
	n := &Namer{h: heap{mem: mem, l: l}, scripts: map[uint64]*script{}}
	if l.HasCode {
		n.codes = newCodes(&n.h, &l.Code)
	}
	return n
}

// Frame names the frame of the SharedFunctionInfo sfi at position.
func (n *Namer) Frame(sfi uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	h, l := &n.h, n.h.l
	if err := h.expect(sfi, l.TypeSharedFunctionInfo, "SharedFunctionInfo"); err != nil {
		return runtimes.Frame{}, err
	}
	f := runtimes.Frame{Function: anonymous}
	nameOrScope, err := h.field(sfi, l.SFINameOrScopeInfo)
	if err != nil {
		return f, err
	}
	start := int32(-1)
	var name uint64
	if !isSmi(nameOrScope) {
		t, err := h.typeOf(nameOrScope)
		if err != nil {
			return f, fmt.Errorf("name of %#x: %w", sfi, err)
		}
		switch {
		case t == l.TypeScopeInfo:
			si, err := h.readScopeInfo(nameOrScope)
			if err != nil {
				return f, fmt.Errorf("scope info of %#x: %w", sfi, err)
			}
			name, start = si.name, si.start
		case t < l.FirstNonstringType:
			name = nameOrScope
		}
	}
	if name != 0 {
		s, err := h.readString(name, maxNameChars)
		if err != nil {
			return f, fmt.Errorf("name of %#x: %w", sfi, err)
		}
		if s != "" {
			f.Function = s
		}
	}

	scr, err := n.scriptOf(sfi)
	if err != nil {
		return f, err
	}
	if scr == 0 {
		return f, nil // a builtin or API function: no script
	}
	s, err := n.script(scr, now)
	if err != nil {
		return f, err
	}
	f.File = s.name

	pos := int32(-1)
	table := n.positions(sfi)
	if position != 0 && position != positionUnknown && table != nil {
		if p, ok := positionAt(table, int32(position)-1); ok {
			pos = p
		}
	}
	if pos < 0 {
		pos = start
	}
	if pos < 0 && len(table) > 0 {
		pos = table[0].Position
	}
	if pos < 0 {
		pos = n.uncompiledStart(sfi)
	}
	if pos >= 0 && s.ends != nil {
		f.Line = lineOf(s.ends, pos)
	}
	return f, nil
}

// scriptOf returns the Script of sfi (through its DebugInfo when it has
// one), 0 when it has none (a builtin or API function).
func (n *Namer) scriptOf(sfi uint64) (uint64, error) {
	h, l := &n.h, n.h.l
	scr, err := h.field(sfi, l.SFIScript)
	if err != nil {
		return 0, err
	}
	if l.TypeDebugInfo != 0 && h.is(scr, l.TypeDebugInfo) {
		if scr, err = h.field(scr, l.DebugInfoScript); err != nil {
			return 0, err
		}
	}
	if !h.is(scr, l.TypeScript) {
		return 0, nil
	}
	return scr, nil
}

// bytecode returns the BytecodeArray of sfi, found in its function data
// directly, through a baseline Code object or an InterpreterData; 0 when it
// has none (not compiled, a builtin).
func (n *Namer) bytecode(sfi uint64) uint64 {
	h, l := &n.h, n.h.l
	fd, err := h.field(sfi, l.SFIFunctionData)
	if err != nil || isSmi(fd) {
		return 0
	}
	for range 3 { // Code → InterpreterData → BytecodeArray at most
		t, err := h.typeOf(fd)
		if err != nil {
			return 0
		}
		switch t {
		case l.TypeBytecodeArray:
			return fd
		case l.TypeCode:
			fd, err = h.field(fd, l.CodeBytecode)
		case l.TypeInterpreterData:
			fd, err = h.field(fd, l.InterpreterDataBytecode)
		default:
			return 0
		}
		if err != nil || isSmi(fd) {
			return 0
		}
	}
	return 0
}

// positions returns the decoded source position table of sfi's bytecode,
// nil when there is none (not compiled, or positions not collected: V8
// collects them lazily).
func (n *Namer) positions(sfi uint64) []positionEntry {
	h, l := &n.h, n.h.l
	bc := n.bytecode(sfi)
	if bc == 0 {
		return nil
	}
	t, err := h.field(bc, l.BytecodeSourcePositions)
	if err != nil || !h.is(t, l.TypePositionTables...) {
		return nil
	}
	b, err := h.byteArray(t, maxPositionTable)
	if err != nil {
		return nil
	}
	entries, err := decodePositions(b)
	if err != nil {
		return nil
	}
	return entries
}

// uncompiledStart returns the start position an uncompiled function's
// UncompiledData holds, -1 when it has none.
func (n *Namer) uncompiledStart(sfi uint64) int32 {
	h, l := &n.h, n.h.l
	fd, err := h.field(sfi, l.SFIFunctionData)
	if err != nil || !h.is(fd, l.TypeUncompiled...) {
		return -1
	}
	v, err := h.u32(fd - heapObjectTag + uint64(l.UncompiledStart))
	if err != nil || int32(v) < 0 {
		return -1
	}
	return int32(v)
}

// script reads the Script at scr, or takes it from the cache: as is while
// recent, after a check that its source is the same string when not.
func (n *Namer) script(scr uint64, now time.Time) (*script, error) {
	h, l := &n.h, n.h.l
	cached, ok := n.scripts[scr]
	if ok && now.Sub(cached.at) <= recheck {
		return cached, nil
	}
	source, err := h.field(scr, l.ScriptSource)
	if err != nil {
		return nil, err
	}
	length := -1
	if !isSmi(source) {
		if n, _, err := h.stringLength(source); err == nil {
			length = n
		}
	}
	if ok && cached.source == source && cached.length == length {
		cached.at = now
		return cached, nil
	}
	s := &script{source: source, length: length, at: now}
	if nameObj, err := h.field(scr, l.ScriptName); err == nil && !isSmi(nameObj) {
		s.name, _ = h.readString(nameObj, maxNameChars) // "": unnamed (eval, new Function)
	}
	if ends, err := h.field(scr, l.ScriptLineEnds); err == nil && h.is(ends, l.TypeFixedArray) {
		s.ends, _ = h.smiArray(ends, maxLineEndsArray)
	}
	if s.ends == nil && length >= 0 && length <= maxSourceChars {
		s.ends, _ = h.lineEnds(source, maxSourceChars)
	}
	if len(n.scripts) >= maxScripts {
		clear(n.scripts)
	}
	n.scripts[scr] = s
	return s, nil
}

// cookie is the identity of the SharedFunctionInfo at sfi, read in one
// go: its map, name (or ScopeInfo) and script words. A frame named before
// is named the same while its function's cookie is unchanged.
func (n *Namer) cookie(sfi uint64) (uint64, error) {
	h, l := &n.h, n.h.l
	addr, err := objectAddr(sfi)
	if err != nil {
		return 0, err
	}
	end := max(l.SFINameOrScopeInfo, l.SFIScript) + 8
	var b [maxField + 8]byte
	if int(end) > len(b) {
		return 0, fmt.Errorf("SharedFunctionInfo fields at %d: out of bounds", end)
	}
	if err := h.read(addr, b[:end]); err != nil {
		return 0, err
	}
	word := func(off uint16) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	return word(l.HeapObjectMap) ^ word(l.SFINameOrScopeInfo)*31 ^ word(l.SFIScript)*131, nil
}
