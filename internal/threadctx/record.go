package threadctx

import "unicode/utf8"

// KeyMapAttribute is the process context attribute (OTEP 4719's
// ProcessContext.attributes) that names the records' key indexes.
const KeyMapAttribute = "threadlocal.attribute_key_map"

// MaxAttributes bounds the attributes taken from one record.
const MaxAttributes = 32

// DecodeAttributes decodes a record's attrs-data (entries of a key index,
// a length and that many bytes of UTF-8 value) with keys, the process's
// key map: an entry whose index the map does not name, or whose value is
// not UTF-8, is left out, a later entry of a key wins, and decoding stops
// at an entry the data cannot hold whole (OTEP 4947). It returns the
// attributes and how many entries were left out.
func DecodeAttributes(data []byte, keys []string) (map[string]string, int) {
	var out map[string]string
	dropped := 0
	for len(data) >= 2 {
		key, n := int(data[0]), int(data[1])
		if len(data) < 2+n {
			break
		}
		value := data[2 : 2+n]
		data = data[2+n:]
		if key >= len(keys) || keys[key] == "" || !utf8.Valid(value) {
			dropped++
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if _, ok := out[keys[key]]; !ok && len(out) >= MaxAttributes {
			dropped++
			continue
		}
		out[keys[key]] = string(value)
	}
	return out, dropped
}
