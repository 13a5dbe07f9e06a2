package v8

import (
	"errors"
	"sort"
)

// A source position table (a BytecodeArray's) is a sequence of entries,
// each two zigzag VLQ integers (7 bits a byte, low first, high bit: more):
// the code offset's delta from the previous entry (negated minus one for
// an expression position, as is for a statement), and the delta of the raw
// source position (bit 0: external; bits 1..30: script offset + 1; above:
// inlining id). The first entry is the function's entry (code offset -1,
// its start position).

// maxPositionTable bounds the tables read.
const maxPositionTable = 1 << 20

var errPositionTable = errors.New("malformed source position table")

// positionEntry is one entry of a source position table.
type positionEntry struct {
	CodeOffset int32
	Position   int32 // script offset (UTF-16 units), -1: none
	Statement  bool
}

// decodeVLQ reads one zigzag VLQ integer of b at *i.
func decodeVLQ(b []byte, i *int) (int64, error) {
	var u uint64
	for shift := 0; ; shift += 7 {
		if *i >= len(b) || shift > 35 {
			return 0, errPositionTable
		}
		c := b[*i]
		*i++
		u |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			break
		}
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

// decodePositions decodes a BytecodeArray's source position table: its
// first entry may be the function's entry (code offset -1).
func decodePositions(b []byte) ([]positionEntry, error) {
	raw, err := decodeTable(b, true)
	if err != nil {
		return nil, err
	}
	out := make([]positionEntry, 0, len(raw))
	for _, e := range raw {
		pos := scriptOffset(e.raw)
		if e.raw&1 != 0 { // external (wasm) position
			pos = -1
		}
		out = append(out, positionEntry{CodeOffset: e.offset, Position: pos, Statement: e.statement})
	}
	return out, nil
}

// decodeTable decodes a source position table's entries with their raw
// positions; entry says the first may be the function's entry (bytecode
// tables), a statement at offset -1 encoded as an expression at 0 would be.
func decodeTable(b []byte, entry bool) ([]codePosition, error) {
	var out []codePosition
	var code, raw int64
	for i := 0; i < len(b); {
		d, err := decodeVLQ(b, &i)
		if err != nil {
			return nil, err
		}
		p, err := decodeVLQ(b, &i)
		if err != nil {
			return nil, err
		}
		stmt := d >= 0
		switch {
		case entry && len(out) == 0 && d == -1:
			code, stmt = -1, true
		case stmt:
			code += d
		default:
			code += -d - 1
		}
		raw += p
		if code < -1 || !entry && code < 0 || code > 1<<30 || raw < 0 || raw >= 1<<47 {
			return nil, errPositionTable
		}
		out = append(out, codePosition{offset: int32(code), raw: raw, statement: stmt})
	}
	return out, nil
}

// positionAt returns the source position of the last entry at or before
// code offset off; false when there is none.
func positionAt(entries []positionEntry, off int32) (int32, bool) {
	pos, ok := int32(-1), false
	for _, e := range entries {
		if e.CodeOffset > off {
			break
		}
		if e.Position >= 0 {
			pos, ok = e.Position, true
		}
	}
	return pos, ok
}

// lineOf returns the 1-based line of source position pos given the
// positions of the line ends (ascending; each the position of its line
// feed, the last the end of the source); 0 when pos is past the end.
func lineOf(ends []int32, pos int32) int64 {
	if pos < 0 {
		return 0
	}
	i := sort.Search(len(ends), func(i int) bool { return ends[i] >= pos })
	if i == len(ends) {
		return 0
	}
	return int64(i) + 1
}
