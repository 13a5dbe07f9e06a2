package symbolize

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePerfMap(t *testing.T) {
	in := "3ef414c0 398 RegExp:[{(]\n" +
		"0x3ef41000 0x40 Stub:CEntry with spaces\n" +
		"3ef42000 0 zero size\n" +
		"bad\n" +
		"zz 10 x\n" +
		"10 zz x\n" +
		"20 10\n" +
		"ffffffffffffffff 10 overflow\n"
	entries, err := parsePerfMap(strings.NewReader(in), int64(len(in)))
	require.NoError(t, err)
	require.Len(t, entries, 3)
	pm := &perfMap{entries: entries}
	tests := []struct {
		addr uint64
		want string
	}{
		{0x3ef414c0, "RegExp:[{(]"},
		{0x3ef414c0 + 0x397, "RegExp:[{(]"},
		{0x3ef414c0 + 0x398, ""},
		{0x3ef41010, "Stub:CEntry with spaces"},
		{0x3ef42000, "zero size"},
		{0x3ef42001, ""},
		{0x10, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, pm.lookup(tt.addr), "%#x", tt.addr)
	}
}

func FuzzParsePerfMap(f *testing.F) {
	f.Add("3ef414c0 398 RegExp:[{(]\n0x10 0x20 a b c\n")
	f.Add("ffffffffffffffff 1 x\n")
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := parsePerfMap(strings.NewReader(s), int64(len(s)))
		if err != nil {
			return
		}
		pm := &perfMap{entries: entries}
		for _, e := range entries {
			if e.name == "" || e.start+e.size < e.start {
				t.Fatalf("bad entry %+v", e)
			}
			pm.lookup(e.start)
		}
		pm.lookup(0)
		pm.lookup(^uint64(0))
	})
}
