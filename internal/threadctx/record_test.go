package threadctx

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecodeAttributes(t *testing.T) {
	keys := []string{"http.route", "http.request.method", ""}
	entry := func(key byte, value string) []byte { return append([]byte{key, byte(len(value))}, value...) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name    string
		data    []byte
		want    map[string]string
		dropped int
	}{
		{"none", nil, nil, 0},
		{"two", cat(entry(0, "/checkout"), entry(1, "GET")), map[string]string{"http.route": "/checkout", "http.request.method": "GET"}, 0},
		{"the last of a key wins", cat(entry(0, "/a"), entry(0, "/b")), map[string]string{"http.route": "/b"}, 0},
		{"an index beyond the map", cat(entry(7, "x"), entry(1, "PUT")), map[string]string{"http.request.method": "PUT"}, 1},
		{"an index the map leaves empty", cat(entry(2, "x")), nil, 1},
		{"not UTF-8", cat(entry(0, "\xff\xfe")), nil, 1},
		{"cut in a value", cat(entry(1, "GET"), []byte{0, 9, 'a'}), map[string]string{"http.request.method": "GET"}, 0},
		{"cut in a header", cat(entry(1, "GET"), []byte{0}), map[string]string{"http.request.method": "GET"}, 0},
		{"an empty value", cat(entry(0, "")), map[string]string{"http.route": ""}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := DecodeAttributes(tt.data, keys)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.dropped, dropped)
		})
	}
}
