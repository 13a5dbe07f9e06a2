package symbolize

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestELFSymbolLookup(t *testing.T) {
	strtab := []byte("\x00big\x00nested\x00nosize\x00last\x00")
	ef := &elfFile{symsBuilt: true, syms: symbolTable{strtab: strtab, entries: []symEntry{
		{addr: 0x1000, size: 0x100, name: 1},
		{addr: 0x1010, size: 0x10, name: 5},
		{addr: 0x2000, size: 0, name: 12},
		{addr: 0x3000, size: 0x10, name: 19},
	}}}
	tests := []struct {
		addr uint64
		want string
	}{
		{0xfff, ""},
		{0x1000, "big"},
		{0x1015, "nested"},
		{0x1030, "big"},
		{0x1100, ""},
		{0x2fff, "nosize"},
		{0x300f, "last"},
		{0x3010, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ef.symbol(tt.addr), "%#x", tt.addr)
	}
}

func TestDemangle(t *testing.T) {
	for in, want := range map[string]string{
		"_ZN6shapes9perimeterEi": "shapes::perimeter(int)",
		"main":                   "main",
		"_Znotvalid!!":           "_Znotvalid!!",
	} {
		assert.Equal(t, want, demangleName(in))
	}
}

func TestFindNote(t *testing.T) {
	var b bytes.Buffer
	w := func(v uint32) { _ = binary.Write(&b, binary.LittleEndian, v) }
	w(4)
	w(3)
	w(1)
	b.WriteString("XYZ\x00abc\x00")
	w(4)
	w(4)
	w(3)
	b.WriteString("GNU\x00\xde\xad\xbe\xef")
	desc, ok := findNote(b.Bytes(), binary.LittleEndian, "GNU", 3)
	assert.True(t, ok)
	assert.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef}, desc)
	for n := 0; n < b.Len(); n++ { // truncated notes never panic
		findNote(b.Bytes()[:n], binary.LittleEndian, "GNU", 3)
	}
}

func TestParseELFGarbage(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("\x7fELF"), bytes.Repeat([]byte{0xff}, 4096)} {
		_, err := parseELF(in)
		assert.Error(t, err)
	}
}

func TestGoBuildIDString(t *testing.T) {
	assert.Equal(t, "abc/def", goBuildIDString([]byte("xx\xff Go build ID: \"abc/def\"\n \xff")))
	assert.Equal(t, "", goBuildIDString([]byte("\xff Go build ID: \"unterminated")))
	assert.Equal(t, "", goBuildIDString(nil))
}
