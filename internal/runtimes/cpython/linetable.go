package cpython

// lineTableFormat is the encoding of a code object's line table.
type lineTableFormat uint8

const (
	formatLnotab    lineTableFormat = iota + 1 // 3.9 co_lnotab
	formatLinetable                            // 3.10 co_linetable
	formatLocations                            // 3.11+ co_linetable, the location table
)

func lineTableFormatOf(v Version) lineTableFormat {
	switch {
	case v.Major == 3 && v.Minor <= 9:
		return formatLnotab
	case v.Major == 3 && v.Minor == 10:
		return formatLinetable
	default:
		return formatLocations
	}
}

// Line returns the source line of the instruction at index instruction (in
// code units), or FirstLine when the table has none for it (an index past
// the bytecode, an instruction without a line, a malformed table).
func (c *Code) Line(instruction uint32) int {
	if c.Instructions > 0 && uint64(instruction) >= uint64(c.Instructions) {
		return c.FirstLine
	}
	var line int
	var ok bool
	switch c.format {
	case formatLnotab:
		line, ok = lnotabLine(c.lineTable, c.FirstLine, int(instruction)*2)
	case formatLinetable:
		line, ok = linetableLine(c.lineTable, c.FirstLine, int(instruction)*2)
	case formatLocations:
		line, ok = locationTableLine(c.lineTable, c.FirstLine, int(instruction))
	}
	if !ok {
		return c.FirstLine
	}
	return line
}

// lnotabLine decodes co_lnotab (3.9): pairs of (bytecode offset increment,
// signed line increment). The line at offset is that after the last pair
// whose offset is not beyond it.
func lnotabLine(table []byte, firstLine, offset int) (int, bool) {
	line, addr := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		addr += int(table[i])
		if addr > offset {
			break
		}
		line += int(int8(table[i+1]))
	}
	return line, true
}

// noLineDelta is the line increment of a 3.10 co_linetable range without a
// line.
const noLineDelta = -128

// linetableLine decodes co_linetable (3.10): pairs of (range length in
// bytes, signed line increment); each pair is a range following the last.
func linetableLine(table []byte, firstLine, offset int) (int, bool) {
	line, end := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int(table[i])
		delta := int(int8(table[i+1]))
		if delta != noLineDelta {
			line += delta
		}
		if start <= offset && offset < end {
			return line, delta != noLineDelta
		}
	}
	return 0, false
}

// Location table entry codes (3.11+): bits 3-6 of an entry's first byte.
const (
	locationOneLine0  = 10 // same line, then column bytes; 11 and 12 add 1 and 2
	locationNoColumns = 13 // signed varint line increment
	locationLong      = 14 // signed varint line increment, then end line and columns
	locationNone      = 15 // no location
)

// locationTableLine decodes the location table (3.11+). An entry opens with
// a byte with bit 7 set: bits 3-6 its code, bits 0-2 its length in code
// units minus one; the bytes that follow until the next such byte depend on
// the code. Varints are 6-bit groups, least significant first, bit 6 set
// when another group follows; a signed varint keeps its sign in bit 0.
func locationTableLine(table []byte, firstLine, unit int) (int, bool) {
	line, end := firstLine, 0
	for i := 0; i < len(table); {
		head := table[i]
		i++
		if head&0x80 == 0 { // not an entry's first byte: malformed, resynchronise
			continue
		}
		code := int(head >> 3 & 15)
		switch {
		case code == locationLong || code == locationNoColumns:
			line += signedVarint(table[i:])
		case code >= locationOneLine0 && code < locationNoColumns:
			line += code - locationOneLine0
		}
		start := end
		end += int(head&7) + 1
		if start <= unit && unit < end {
			return line, code != locationNone
		}
		for i < len(table) && table[i]&0x80 == 0 {
			i++
		}
	}
	return 0, false
}

// signedVarint decodes the location table's signed varint at the start of b
// (0 for a truncated one).
func signedVarint(b []byte) int {
	var v uint32
	for i, shift := 0, 0; i < len(b) && shift < 32; i, shift = i+1, shift+6 {
		v |= uint32(b[i]&63) << shift
		if b[i]&64 == 0 {
			if v&1 != 0 {
				return -int(v >> 1)
			}
			return int(v >> 1)
		}
	}
	return 0
}
