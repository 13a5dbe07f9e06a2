package golabels

import (
	"maps"
	"testing"
)

func entry(key, value string) []byte {
	return append(append([]byte{byte(len(key))}, key...), append([]byte{byte(len(value))}, value...)...)
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := Decode(tt.data)
			if !maps.Equal(got, tt.want) || dropped != tt.dropped {
				t.Errorf("Decode = %v, %d dropped; want %v, %d", got, dropped, tt.want, tt.dropped)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(entry("handler", "checkout"))
	f.Add([]byte{3, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		labels, _ := Decode(data)
		size := 0
		for k, v := range labels {
			size += 2 + len(k) + len(v)
		}
		if size > len(data) {
			t.Fatalf("%d bytes of labels from %d bytes", size, len(data))
		}
	})
}
