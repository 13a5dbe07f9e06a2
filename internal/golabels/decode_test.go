package golabels

import (
	"maps"
	"testing"
)

func entry(key, value string) []byte {
	return append(append([]byte{byte(len(key))}, key...), append([]byte{byte(len(value))}, value...)...)
}

// ref is a string stored by reference at addr, n bytes.
func ref(addr uint64, n byte) []byte {
	b := []byte{stringRef}
	for i := range 6 {
		b = append(b, byte(addr>>(8*i)))
	}
	return append(b, n)
}

// rodata reads the strings of a pretend executable at 0x4a0000.
func rodata(addr uint64, n int) ([]byte, bool) {
	const base, text = 0x4a0000, "handlertenantcheckout"
	if addr < base || addr+uint64(n) > base+uint64(len(text)) {
		return nil, false
	}
	return []byte(text[addr-base : addr-base+uint64(n)]), true
}

func TestDecode(t *testing.T) {
	cut := entry("route", "/caf\u00e9")
	cut = append(entry("route", "/caf\xc3"), cut[len(cut):]...) // é cut after its first byte
	tests := []struct {
		name    string
		data    []byte
		want    map[string]string
		dropped int
	}{
		{"none", nil, nil, 0},
		{"two", append(entry("handler", "checkout"), entry("tenant", "a")...), map[string]string{"handler": "checkout", "tenant": "a"}, 0},
		{"empty value", entry("k", ""), map[string]string{"k": ""}, 0},
		{"a later key wins", append(entry("k", "1"), entry("k", "2")...), map[string]string{"k": "2"}, 0},
		{"value cut inside a character", cut, map[string]string{"route": "/caf"}, 0},
		{"not UTF-8", append(entry("k", "\xff\xfe"), entry("ok", "1")...), map[string]string{"ok": "1"}, 1},
		{"key runs past the end", []byte{5, 'a', 'b'}, nil, 1},
		{"value runs past the end", append(entry("a", "b"), 1, 'k', 9, 'v'), map[string]string{"a": "b"}, 1},
		{"key without value", append(entry("a", "b"), 1, 'k'), map[string]string{"a": "b"}, 1},
		{"key and value by reference", append(ref(0x4a0000, 7), ref(0x4a000d, 8)...), map[string]string{"handler": "checkout"}, 0},
		{"a reference and a copy", append(ref(0x4a0007, 6), 3, 't', '-', '4'), map[string]string{"tenant": "t-4"}, 0},
		{"a reference not read", append(append(ref(0x4b0000, 7), entry("", "x")[1:]...), entry("ok", "1")...), map[string]string{"ok": "1"}, 1},
		{"a reference of 0 bytes", append(ref(0x4a0000, 0), 1, 'v'), nil, 1},
		{"a reference cut short", ref(0x4a0000, 7)[:5], nil, 1},
		{"a reference of the top address", append(ref(1<<48-1, 200), 1, 'v'), nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := Decode(tt.data, rodata)
			if !maps.Equal(got, tt.want) || dropped != tt.dropped {
				t.Errorf("Decode = %v, %d dropped; want %v, %d", got, dropped, tt.want, tt.dropped)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(entry("handler", "checkout"))
	f.Add([]byte{3, 'a'})
	f.Add(append(ref(0x4a0000, 7), ref(0x4a000d, 8)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		labels, _ := Decode(data, nil) // no references read: every string copied
		size := 0
		for k, v := range labels {
			size += 2 + len(k) + len(v)
		}
		if size > len(data) {
			t.Fatalf("%d bytes of labels from %d bytes", size, len(data))
		}
		labels, _ = Decode(data, rodata)
		for k, v := range labels {
			if len(k) > 255 || len(v) > 255 {
				t.Fatalf("label %q=%q longer than a length byte says", k, v)
			}
		}
	})
}
