package golabels

import "unicode/utf8"

// Bounds of what the samplers copy (bpf/golabels.h): labels per sample,
// and bytes of a key and of a value; and of the bytes of all of a
// sample's labels (bpf/threadctx.h THREAD_CTX_ATTRS_MAX). Longer are cut,
// fewer kept, and counted.
const (
	MaxLabels     = 8
	MaxKeyBytes   = 64
	MaxValueBytes = 128
	MaxBytes      = 616
)

// ReadString reads n bytes at addr of the process whose labels are
// decoded, from its executable's read-only segment; false when it cannot.
type ReadString func(addr uint64, n int) ([]byte, bool)

// A string the samplers stored by reference (GO_STRING_REF in
// bpf/golabels.h): this byte, its address in 6 bytes (little endian),
// its length.
const (
	stringRef     = 0xff
	stringRefSize = 8
)

// Decode returns the labels the samplers copied: entries of a key and a
// value, each a length and its bytes or a reference read through read
// (nil: none can be). A key or value cut inside a character ends before
// it; an entry not UTF-8 otherwise, whose reference cannot be read, or
// that the data cannot hold whole, is left out, and dropped counts those.
func Decode(data []byte, read ReadString) (labels map[string]string, dropped int) {
	for len(data) > 0 {
		key, rest, ok := field(data, read)
		if !ok {
			return labels, dropped + 1
		}
		value, rest, ok := field(rest, read)
		if !ok {
			return labels, dropped + 1
		}
		data = rest
		if key == nil || value == nil {
			dropped++ // a reference not read
			continue
		}
		key, value = validPrefix(key), validPrefix(value)
		if !utf8.Valid(key) || !utf8.Valid(value) {
			dropped++
			continue
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[string(key)] = string(value)
	}
	return labels, dropped
}

// field returns the string data starts with and what follows it; ok false
// when data cannot hold it; a nil string (ok true) for a reference that
// could not be read.
func field(data []byte, read ReadString) (s, rest []byte, ok bool) {
	if len(data) < 1 {
		return nil, nil, false
	}
	if data[0] != stringRef {
		n := int(data[0])
		if len(data) < 1+n {
			return nil, nil, false
		}
		return data[1 : 1+n : 1+n], data[1+n:], true
	}
	if len(data) < stringRefSize {
		return nil, nil, false
	}
	var addr uint64
	for i := 6; i >= 1; i-- {
		addr = addr<<8 | uint64(data[i])
	}
	n := int(data[7])
	rest = data[stringRefSize:]
	if read == nil || n == 0 {
		return nil, rest, true
	}
	if s, ok = read(addr, n); !ok || len(s) != n {
		return nil, rest, true
	}
	return s, rest, true
}

// validPrefix returns b less a character the samplers' bound cut short:
// a last character's leading bytes, too few for it.
func validPrefix(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) && utf8.Valid(b[:i]) {
			return b[:i]
		}
		break
	}
	return b
}
