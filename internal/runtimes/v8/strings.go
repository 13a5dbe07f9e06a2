package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds of string reads.
const (
	maxNameChars   = 1024     // names (functions, scripts) are truncated here
	maxSourceChars = 16 << 20 // longest script source read for its lines
	maxStringDepth = 64       // nesting of cons, sliced and thin strings
	maxStringParts = 1 << 14  // pieces of one string
	readChunk      = 64 << 10 // bytes read at once
)

var errStringParts = errors.New("string of too many parts")

// chunkFunc receives the characters of a string in order: one byte each
// (Latin-1) or two (UTF-16 little endian).
type chunkFunc func(chars []byte, twoByte bool) error

// stringWalk visits the characters [start, start+n) of strings.
type stringWalk struct {
	h     *heap
	parts int
	emit  chunkFunc
}

// stringLength reads the length of the string at tagged, checking its type
// is a string.
func (h *heap) stringLength(tagged uint64) (int, uint16, error) {
	t, err := h.typeOf(tagged)
	if err != nil {
		return 0, 0, err
	}
	if t >= h.l.FirstNonstringType {
		return 0, 0, fmt.Errorf("%w: %#x is not a string (instance type %d)", ErrWrongType, tagged, t)
	}
	n, err := h.u32(tagged - heapObjectTag + uint64(h.l.StringLength))
	if err != nil {
		return 0, 0, err
	}
	if int32(n) < 0 {
		return 0, 0, fmt.Errorf("string at %#x: negative length", tagged)
	}
	return int(int32(n)), t, nil
}

// walk visits [start, start+n) of the string at tagged, clipped to its length.
func (w *stringWalk) walk(tagged uint64, start, n, depth int) error {
	if depth > maxStringDepth {
		return fmt.Errorf("string at %#x: nested too deep", tagged)
	}
	if w.parts++; w.parts > maxStringParts {
		return errStringParts
	}
	h, l := w.h, w.h.l
	length, t, err := h.stringLength(tagged)
	if err != nil {
		return err
	}
	if start >= length || n <= 0 {
		return nil
	}
	n = min(n, length-start)
	twoByte := t&l.StringEncMask != l.OneByteTag
	width := 1
	if twoByte {
		width = 2
	}
	switch t & l.StringRepresentationMask {
	case l.SeqTag:
		return w.chars(tagged-heapObjectTag+uint64(l.SeqChars), start, n, width, twoByte)
	case l.ExternalTag:
		if t&0x10 != 0 { // kUncachedExternalStringMask: no data pointer kept
			return fmt.Errorf("string at %#x: uncached external string", tagged)
		}
		data, err := h.u64(tagged - heapObjectTag + uint64(l.ExternalResourceData))
		if err != nil {
			return err
		}
		return w.chars(data, start, n, width, twoByte)
	case l.ConsTag:
		first, err := h.field(tagged, l.ConsFirst)
		if err != nil {
			return err
		}
		second, err := h.field(tagged, l.ConsSecond)
		if err != nil {
			return err
		}
		firstLen, _, err := h.stringLength(first)
		if err != nil {
			return err
		}
		if start < firstLen {
			if err := w.walk(first, start, min(n, firstLen-start), depth+1); err != nil {
				return err
			}
		}
		if end := start + n; end > firstLen {
			s := max(start-firstLen, 0)
			return w.walk(second, s, end-firstLen-s, depth+1)
		}
		return nil
	case l.ThinTag:
		actual, err := h.field(tagged, l.ThinActual)
		if err != nil {
			return err
		}
		return w.walk(actual, start, n, depth+1)
	case l.SlicedTag:
		parent, err := h.field(tagged, l.SlicedParent)
		if err != nil {
			return err
		}
		off, err := h.smiField(tagged, l.SlicedOffset)
		if err != nil {
			return err
		}
		if off < 0 {
			return fmt.Errorf("sliced string at %#x: negative offset", tagged)
		}
		return w.walk(parent, int(off)+start, n, depth+1)
	}
	return fmt.Errorf("string at %#x: unknown representation (instance type %d)", tagged, t)
}

// chars emits n characters of width bytes from addr+start*width, in chunks.
func (w *stringWalk) chars(addr uint64, start, n, width int, twoByte bool) error {
	addr += uint64(start * width)
	for n > 0 {
		k := min(n, readChunk/width)
		b := make([]byte, k*width)
		if err := w.h.read(addr, b); err != nil {
			return err
		}
		if err := w.emit(b, twoByte); err != nil {
			return err
		}
		addr += uint64(len(b))
		n -= k
	}
	return nil
}

// readString reads the string at tagged as UTF-8, truncated to maxChars
// characters.
func (h *heap) readString(tagged uint64, maxChars int) (string, error) {
	var units []uint16
	w := &stringWalk{h: h, emit: func(b []byte, twoByte bool) error {
		if twoByte {
			for i := 0; i+1 < len(b); i += 2 {
				units = append(units, binary.LittleEndian.Uint16(b[i:]))
			}
		} else {
			for _, c := range b {
				units = append(units, uint16(c))
			}
		}
		return nil
	}}
	if err := w.walk(tagged, 0, maxChars, 0); err != nil {
		return "", err
	}
	return utf16String(units), nil
}

// utf16String converts UTF-16 to UTF-8; unpaired surrogates become U+FFFD.
func utf16String(units []uint16) string {
	b := make([]byte, 0, len(units))
	for _, r := range utf16.Decode(units) {
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// lineEnds returns the positions (UTF-16 units) of the line feeds of the
// string at tagged, the first max characters of it.
func (h *heap) lineEnds(tagged uint64, max int) ([]int32, error) {
	var ends []int32
	pos := int32(0)
	w := &stringWalk{h: h, emit: func(b []byte, twoByte bool) error {
		if twoByte {
			for i := 0; i+1 < len(b); i += 2 {
				if binary.LittleEndian.Uint16(b[i:]) == '\n' {
					ends = append(ends, pos)
				}
				pos++
			}
			return nil
		}
		for _, c := range b {
			if c == '\n' {
				ends = append(ends, pos)
			}
			pos++
		}
		return nil
	}}
	if err := w.walk(tagged, 0, max, 0); err != nil {
		return nil, err
	}
	return append(ends, pos), nil // the last line ends with the source
}
