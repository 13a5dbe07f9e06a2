package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// CodeLayout is how a V8 build's compiled code (Sparkplug, Maglev,
// TurboFan) is found from a pc, and what of it names the frames there.
// Numbers from v8dbg where the build exports them, else from codeGaps.
type CodeLayout struct {
	// Inline: the Code object holds its instructions, at Start (V8 10);
	// else an InstructionStream holds them and points at its Code (V8 11
	// on), which points back (CodeStream) and says where they start.
	Inline      bool
	Start       uint16 // Inline: the instructions' offset in the Code
	StreamCode  uint16 // InstructionStream → its Code
	CodeStream  uint16 // Code → its InstructionStream
	CodeStart   uint16 // Code → the instructions' address
	Size        uint16 // Code's instruction size (int32)
	Deopt       uint16 // Code → its DeoptimizationData (optimized code)
	Positions   uint16 // Code → its source position table
	DeoptTypes  []uint16
	Inlining    int    // DeoptimizationData index of the InliningPositions
	Literals    int    // DeoptimizationData index of the array of inlined functions
	TypeWrapper uint16 // SharedFunctionInfoWrapper (V8 13: inlined functions are wrapped); 0: none
	Wrapped     uint16 // SharedFunctionInfoWrapper → its SharedFunctionInfo
}

// codeGap is what v8dbg lacks of a version's CodeLayout. Measured on node
// 18.20.8 (V8 10.2), 20.20.2 (11.3), 22.23.3 (12.4) and 24.21.0 (13.6):
// from the pc of a sampled TurboFan frame of testdata/workloads/
// nodechain.js, scanning back to the object holding it (its map's
// instance type CODE_TYPE for 10.2; for the others the word at 8 a Code
// whose instruction_stream field points back and whose instruction_start
// and size hold the pc), then dumping the Code's fields and its
// DeoptimizationData's elements by instance type (the TestCodeLayout
// process test repeats it on every version). The DeoptimizationData
// indices match V8's deoptimization-data.h of those versions
// (kLiteralArrayIndex / kProtectedLiteralArrayIndex 2, kInliningPositions
// 7, or 8 in 13.x where kLiteralArrayIndex moved to 3).
type codeGap struct {
	inline                       bool
	streamCode, codeStream, size uint16
	deopt, positions             uint16
	inlining, literals           int
}

var codeGaps = map[[2]int]codeGap{
	{10, 2}: {inline: true, deopt: 16, positions: 24, inlining: 7, literals: 2},
	{11, 3}: {streamCode: 8, codeStream: 32, size: 48, deopt: 16, positions: 24, inlining: 7, literals: 2},
	{12, 4}: {streamCode: 8, deopt: 8, positions: 16, inlining: 7, literals: 2},
	{13, 6}: {streamCode: 8, deopt: 8, positions: 16, inlining: 8, literals: 3},
}

// readCodeLayout reads the code layout of V8 major.minor; false when no
// layout is known (compiled frames are then named by function alone).
func readCodeLayout(r *reader, major, minor int) (CodeLayout, bool) {
	g, ok := codeGaps[[2]int{major, minor}]
	if !ok {
		return CodeLayout{}, false
	}
	sub := &reader{d: r.d} // what is missing here does not fail the layout
	c := CodeLayout{
		Inline:     g.inline,
		StreamCode: g.streamCode,
		Deopt:      sub.fieldOr(g.deopt, "Code", "deoptimization_data"),
		Positions:  sub.fieldOr(g.positions, "Code", "source_position_table"),
		Inlining:   g.inlining,
		Literals:   g.literals,
	}
	if g.inline {
		c.Start = sub.field("Code", "instruction_start")
		c.Size = sub.field("Code", "instruction_size")
	} else {
		c.CodeStream = sub.fieldOr(g.codeStream, "Code", "instruction_stream")
		c.CodeStart = sub.fieldOr(40, "Code", "instruction_start")
		c.Size = sub.fieldOr(g.size, "Code", "instruction_size")
	}
	for _, class := range []string{"FixedArray", "TrustedFixedArray", "ProtectedFixedArray"} {
		if t, ok := sub.typeOf(class); ok {
			c.DeoptTypes = append(c.DeoptTypes, t)
		}
	}
	if t, ok := sub.typeOf("SharedFunctionInfoWrapper"); ok {
		c.TypeWrapper = t
		c.Wrapped = sub.field("SharedFunctionInfoWrapper", "shared_info")
	}
	return c, sub.err() == nil
}

// Bounds of the code search and of what is kept of code.
const (
	maxCodeScan   = 256 << 10 // bytes below a pc searched for its code's start
	codeScanChunk = 4 << 10
	maxCodes      = 4096
	maxMapsTested = 4096
	// maxCandidates bounds the words tested (with reads) per search before
	// the holders' map is known; after, a search only compares words.
	// Holders start 16-byte aligned (their instructions 64-byte aligned,
	// after a header of 16, 32 or 128 bytes), so only those words are.
	maxCandidates   = 256
	holderAlign     = 16
	maxInlineDepth  = 16
	maxInliningSize = 1 << 20
)

var errNoCode = errors.New("no compiled code holds the pc")

// weakTag marks a weak reference (a strong pointer | 2).
const weakTag = 2

// compiled is one piece of compiled code: its instructions [start, end),
// its source positions (raw, by code offset) and what its inlined
// functions are.
type compiled struct {
	start, end uint64
	code       uint64 // the Code, tagged
	positions  []codePosition
	inlining   []inliningPosition
	literals   uint64 // the array of inlined functions, tagged; 0: none
	at         time.Time
}

// codePosition is an entry of a Code's source position table: at code
// offset offset, the raw SourcePosition (bit 0 external, bits 1-30 the
// script offset + 1, bits 31-46 the inlining id + 1).
type codePosition struct {
	offset    int32
	raw       int64
	statement bool
}

// inliningPosition is an InliningPosition: where (a raw SourcePosition of
// the caller) a function (its index in the inlined functions) was inlined.
type inliningPosition struct {
	caller   int64
	function int32
}

func scriptOffset(raw int64) int32 { return int32((raw>>1)&(1<<30-1)) - 1 }
func inliningID(raw int64) int32   { return int32((raw>>31)&0xffff) - 1 }

// decodeCodePositions decodes a Code's source position table.
func decodeCodePositions(b []byte) ([]codePosition, error) { return decodeTable(b, false) }

// rawAt returns the raw position of the last entry at or before off.
func rawAt(positions []codePosition, off int32) (int64, bool) {
	i := sort.Search(len(positions), func(i int) bool { return positions[i].offset > off })
	if i == 0 {
		return 0, false
	}
	return positions[i-1].raw, true
}

// decodeInlining decodes a PodArray of InliningPosition: 16 bytes each,
// the caller's raw SourcePosition then the function's index.
func decodeInlining(b []byte) []inliningPosition {
	out := make([]inliningPosition, 0, len(b)/16)
	for ; len(b) >= 16; b = b[16:] {
		out = append(out, inliningPosition{
			caller:   int64(binary.LittleEndian.Uint64(b)),
			function: int32(binary.LittleEndian.Uint32(b[8:])),
		})
	}
	return out
}

// codes finds and keeps the compiled code of one process.
type codes struct {
	h *heap
	c *CodeLayout
	// byStart holds the code found, by start; starts sorted.
	byStart map[uint64]*compiled
	starts  []uint64
	// The map of the objects holding instructions once one was found (0
	// before), and the words tested for it before that.
	streamMap uint64
	notMaps   map[uint64]bool
	// failed holds when a search from a page of pcs last failed: pcs
	// there (not JIT code: a builtin's, native code's) are not searched
	// again until recheck.
	failed map[uint64]time.Time
}

func newCodes(h *heap, c *CodeLayout) *codes {
	return &codes{h: h, c: c, byStart: map[uint64]*compiled{}, notMaps: map[uint64]bool{}, failed: map[uint64]time.Time{}}
}

// at returns the code holding pc, from what was found before while recent,
// else found in the process's memory.
func (cs *codes) at(pc uint64, now time.Time) (*compiled, error) {
	i := sort.Search(len(cs.starts), func(i int) bool { return cs.starts[i] > pc })
	if i > 0 {
		if c := cs.byStart[cs.starts[i-1]]; pc < c.end && (now.Sub(c.at) <= recheck || cs.still(c)) {
			c.at = now
			return c, nil
		}
	}
	page := pc &^ 0xfff
	if at, ok := cs.failed[page]; ok && now.Sub(at) <= recheck {
		return nil, fmt.Errorf("%w: %#x", errNoCode, pc)
	}
	c, err := cs.find(pc)
	if err != nil {
		if len(cs.failed) >= maxCodes {
			clear(cs.failed)
		}
		cs.failed[page] = now
		return nil, err
	}
	c.at = now
	if len(cs.byStart) >= maxCodes {
		clear(cs.byStart)
		cs.starts = cs.starts[:0]
	}
	if _, ok := cs.byStart[c.start]; !ok {
		j := sort.Search(len(cs.starts), func(j int) bool { return cs.starts[j] > c.start })
		cs.starts = append(cs.starts, 0)
		copy(cs.starts[j+1:], cs.starts[j:])
		cs.starts[j] = c.start
	}
	cs.byStart[c.start] = c
	return c, nil
}

// still says whether the code read before is still there: its Code is one
// and has the same instructions (else freed, or another's).
func (cs *codes) still(c *compiled) bool {
	h, l, cl := cs.h, cs.h.l, cs.c
	if !h.is(c.code, l.TypeCode) {
		return false
	}
	if cl.Inline {
		return c.code-heapObjectTag+uint64(cl.Start) == c.start
	}
	start, err := h.field(c.code, cl.CodeStart)
	return err == nil && start == c.start
}

// find scans back from pc, a chunk at a time, for the object holding its
// instructions, and reads the code.
func (cs *codes) find(pc uint64) (*compiled, error) {
	buf := make([]byte, codeScanChunk)
	top := pc &^ 7
	tested := 0
	for scanned := uint64(0); scanned < maxCodeScan && top >= codeScanChunk; scanned += codeScanChunk {
		base, n := top-codeScanChunk, uint64(codeScanChunk)
		if err := cs.h.read(base, buf); err != nil {
			// The chunk begins below the mapping (code near its start):
			// the part from the page of top, then nothing below.
			page := top &^ 0xfff
			if page <= base || page == top {
				return nil, err
			}
			base, n = page, top-page
			if err := cs.h.read(base, buf[:n]); err != nil {
				return nil, err
			}
			scanned = maxCodeScan
		}
		for off := int(n) - 8; off >= 0; off -= 8 {
			w := binary.LittleEndian.Uint64(buf[off:])
			if w&heapObjectTagMask != heapObjectTag || !cs.mayBeMap(w) {
				continue
			}
			if cs.streamMap == 0 {
				if (base+uint64(off))%holderAlign != 0 {
					continue
				}
				if tested++; tested > maxCandidates {
					return nil, fmt.Errorf("%w: %#x (its holder's map not found)", errNoCode, pc)
				}
			}
			c, holder := cs.read(base+uint64(off), pc)
			if c != nil {
				cs.streamMap = w
				return c, nil
			}
			if holder {
				// The object holding code nearest below pc ends before
				// it: no code object holds pc (a builtin, regexp code).
				return nil, fmt.Errorf("%w: %#x", errNoCode, pc)
			}
			if cs.streamMap == 0 && len(cs.notMaps) < maxMapsTested {
				cs.notMaps[w] = true
			}
		}
		top = base
	}
	return nil, fmt.Errorf("%w: %#x", errNoCode, pc)
}

// mayBeMap says whether w may be the map of the objects holding
// instructions: the one found before, or one not yet ruled out.
func (cs *codes) mayBeMap(w uint64) bool {
	if cs.streamMap != 0 {
		return w == cs.streamMap
	}
	return !cs.notMaps[w]
}

// read reads the code whose instructions' holder is at obj, if pc is in
// its instructions; holder says obj holds instructions (pc or not).
func (cs *codes) read(obj, pc uint64) (c *compiled, holder bool) {
	h, l, cl := cs.h, cs.h.l, cs.c
	var code, start uint64
	if cl.Inline {
		code = obj + heapObjectTag
		if !h.is(code, l.TypeCode) {
			return nil, false
		}
		start = obj + uint64(cl.Start)
	} else {
		var err error
		if code, err = h.u64(obj + uint64(cl.StreamCode)); err != nil || !h.is(code, l.TypeCode) {
			return nil, false
		}
		if back, err := h.field(code, cl.CodeStream); err != nil || back != obj+heapObjectTag {
			return nil, false
		}
		if start, err = h.field(code, cl.CodeStart); err != nil {
			return nil, false
		}
	}
	size, err := h.u32(code - heapObjectTag + uint64(cl.Size))
	if err != nil {
		return nil, false
	}
	if pc < start || pc >= start+uint64(size) {
		return nil, true
	}
	out := &compiled{start: start, end: start + uint64(size), code: code}
	cs.readDetails(out)
	return out, true
}

// readDetails reads the positions and inlining of optimized code; code
// without deoptimization data (baseline code, whose table is of bytecode
// offsets) keeps none.
func (cs *codes) readDetails(out *compiled) {
	h, l, c := cs.h, cs.h.l, cs.c
	deopt, err := h.field(out.code, c.Deopt)
	if err != nil || !h.is(deopt, c.DeoptTypes...) {
		return
	}
	table, err := h.field(out.code, c.Positions)
	if err != nil || !h.is(table, l.TypePositionTables...) {
		return
	}
	b, err := h.byteArray(table, maxPositionTable)
	if err != nil {
		return
	}
	if out.positions, err = decodeCodePositions(b); err != nil {
		out.positions = nil
		return
	}
	n, err := h.smiField(deopt, l.ArrayLength)
	if err != nil || int(n) <= max(c.Inlining, c.Literals) {
		return
	}
	inl, err := h.field(deopt, l.ArrayData+uint16(8*c.Inlining))
	if err != nil || !h.is(inl, l.TypePositionTables...) {
		return
	}
	if b, err = h.byteArray(inl, maxInliningSize); err == nil {
		out.inlining = decodeInlining(b)
	}
	out.literals, _ = h.field(deopt, l.ArrayData+uint16(8*c.Literals))
}

// inlined returns the SharedFunctionInfo of inlined function i of code.
func (cs *codes) inlined(code *compiled, i int32) (uint64, error) {
	h, l, c := cs.h, cs.h.l, cs.c
	n, err := h.smiField(code.literals, l.ArrayLength)
	if err != nil || i < 0 || i >= n || i >= maxField {
		return 0, fmt.Errorf("inlined function %d of code at %#x: not in its literals", i, code.start)
	}
	sfi, err := h.field(code.literals, l.ArrayData+uint16(8*i))
	if err != nil {
		return 0, err
	}
	sfi &^= weakTag // a weak reference
	if c.TypeWrapper != 0 && h.is(sfi, c.TypeWrapper) {
		if sfi, err = h.field(sfi, c.Wrapped); err != nil {
			return 0, err
		}
	}
	return sfi, h.expect(sfi, l.TypeSharedFunctionInfo, "SharedFunctionInfo")
}
