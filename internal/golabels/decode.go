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

// Decode returns the labels the samplers copied: entries of a key length,
// the key, a value length and the value. A key or value cut inside a
// character ends before it; an entry not UTF-8 otherwise, or that the data
// cannot hold whole, is left out, and dropped counts those.
func Decode(data []byte) (labels map[string]string, dropped int) {
	for len(data) > 0 {
		key, rest, ok := lengthPrefixed(data)
		if !ok {
			return labels, dropped + 1
		}
		value, rest, ok := lengthPrefixed(rest)
		if !ok {
			return labels, dropped + 1
		}
		data = rest
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

func lengthPrefixed(data []byte) (field, rest []byte, ok bool) {
	if len(data) < 1 || len(data) < 1+int(data[0]) {
		return nil, nil, false
	}
	n := int(data[0])
	return data[1 : 1+n], data[1+n:], true
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
