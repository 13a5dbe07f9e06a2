package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// V8 values on x86-64 without pointer compression (official node builds):
// a Smi is value<<32, a heap object pointer is its address+1.
const (
	heapObjectTag     = 1
	heapObjectTagMask = 3
)

// Errors of reading the heap.
var (
	ErrNotObject = errors.New("not a heap object pointer")
	ErrWrongType = errors.New("object of another type")
)

// isSmi says whether tagged value v is a small integer.
func isSmi(v uint64) bool { return v&1 == 0 }

// smiValue decodes a Smi, false when v is none.
func smiValue(v uint64) (int32, bool) {
	if !isSmi(v) || uint32(v) != 0 {
		return 0, false
	}
	return int32(v >> 32), true
}

// heap reads the objects of one process. Not safe for concurrent use.
type heap struct {
	mem io.ReaderAt
	l   *Layout
	buf [8]byte
}

// maxUserAddress bounds user addresses: below 2^47 on x86-64, 2^48 on
// arm64 (where mmap places memory just below it).
const maxUserAddress = 1 << 48

// objectAddr checks tagged is a heap object pointer and returns its address.
func objectAddr(tagged uint64) (uint64, error) {
	if tagged&heapObjectTagMask != heapObjectTag || tagged < 0x1000 || tagged >= maxUserAddress {
		return 0, fmt.Errorf("%w: %#x", ErrNotObject, tagged)
	}
	return tagged - heapObjectTag, nil
}

// read fills b from addr.
func (h *heap) read(addr uint64, b []byte) error {
	if addr >= maxUserAddress || addr+uint64(len(b)) >= maxUserAddress {
		return fmt.Errorf("read %d bytes at %#x: out of the user address space", len(b), addr)
	}
	if _, err := h.mem.ReadAt(b, int64(addr)); err != nil {
		return fmt.Errorf("read %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

func (h *heap) u64(addr uint64) (uint64, error) {
	if err := h.read(addr, h.buf[:8]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(h.buf[:8]), nil
}

func (h *heap) u32(addr uint64) (uint32, error) {
	if err := h.read(addr, h.buf[:4]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(h.buf[:4]), nil
}

// field reads the tagged word at offset off of the object tagged points to.
func (h *heap) field(tagged uint64, off uint16) (uint64, error) {
	a, err := objectAddr(tagged)
	if err != nil {
		return 0, err
	}
	return h.u64(a + uint64(off))
}

// smiField reads a Smi field.
func (h *heap) smiField(tagged uint64, off uint16) (int32, error) {
	v, err := h.field(tagged, off)
	if err != nil {
		return 0, err
	}
	s, ok := smiValue(v)
	if !ok {
		return 0, fmt.Errorf("field at %d of %#x: not a Smi: %#x", off, tagged, v)
	}
	return s, nil
}

// typeOf returns the instance type of the object tagged points to, from its
// map.
func (h *heap) typeOf(tagged uint64) (uint16, error) {
	m, err := h.field(tagged, h.l.HeapObjectMap)
	if err != nil {
		return 0, err
	}
	a, err := objectAddr(m)
	if err != nil {
		return 0, fmt.Errorf("map of %#x: %w", tagged, err)
	}
	if err := h.read(a+uint64(h.l.MapInstanceType), h.buf[:2]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(h.buf[:2]), nil
}

// is says whether tagged points to an object of one of types; false for a
// Smi or an unreadable object.
func (h *heap) is(tagged uint64, types ...uint16) bool {
	if isSmi(tagged) {
		return false
	}
	t, err := h.typeOf(tagged)
	if err != nil {
		return false
	}
	for _, want := range types {
		if t == want {
			return true
		}
	}
	return false
}

// expect checks tagged points to an object of type want.
func (h *heap) expect(tagged uint64, want uint16, what string) error {
	t, err := h.typeOf(tagged)
	if err != nil {
		return fmt.Errorf("%s at %#x: %w", what, tagged, err)
	}
	if t != want {
		return fmt.Errorf("%s at %#x: %w (instance type %d, want %d)", what, tagged, ErrWrongType, t, want)
	}
	return nil
}

// byteArray reads at most max bytes of the (Trusted)ByteArray at tagged.
func (h *heap) byteArray(tagged uint64, max int) ([]byte, error) {
	n, err := h.smiField(tagged, h.l.ArrayLength)
	if err != nil {
		return nil, err
	}
	if n < 0 || int(n) > max {
		return nil, fmt.Errorf("byte array at %#x: length %d out of range", tagged, n)
	}
	b := make([]byte, n)
	return b, h.read(tagged-heapObjectTag+uint64(h.l.ArrayData), b)
}

// smiArray reads the FixedArray of Smis at tagged, at most max of them.
func (h *heap) smiArray(tagged uint64, max int) ([]int32, error) {
	n, err := h.smiField(tagged, h.l.ArrayLength)
	if err != nil {
		return nil, err
	}
	if n < 0 || int(n) > max {
		return nil, fmt.Errorf("fixed array at %#x: length %d out of range", tagged, n)
	}
	b := make([]byte, 8*int(n))
	if err := h.read(tagged-heapObjectTag+uint64(h.l.ArrayData), b); err != nil {
		return nil, err
	}
	out := make([]int32, n)
	for i := range out {
		v, ok := smiValue(binary.LittleEndian.Uint64(b[8*i:]))
		if !ok {
			return nil, fmt.Errorf("fixed array at %#x: element %d is not a Smi", tagged, i)
		}
		out[i] = v
	}
	return out, nil
}
