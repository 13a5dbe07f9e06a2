package symbolize

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzGoTable feeds mutated copies of a real pclntab (and inline data) to
// the reader: it must never panic.
func FuzzGoTable(f *testing.F) {
	f.Add([]byte("\xf1\xff\xff\xff\x00\x00\x01\x08"), []byte{}, uint32(0))
	if bin, err := buildGoForFuzz(); err == nil {
		ef, err := elf.Open(bin)
		if err == nil {
			if s := ef.Section(".gopclntab"); s != nil {
				data, _ := s.Data()
				f.Add(data[:min(len(data), 1<<13)], []byte{1, 2, 3, 4}, uint32(0x401000))
			}
			ef.Close()
		}
	}
	f.Fuzz(func(t *testing.T, data, gofunc []byte, pc uint32) {
		gt, err := parsePclntab(data, 0x401000)
		if err != nil {
			return
		}
		gt.gofunc = gofunc
		for _, p := range []uint64{uint64(pc), 0x401000, 0x401001, gt.textStart + uint64(pc)} {
			gt.lookup(p)
		}
	})
}

// buildGoForFuzz returns the path of the test binary itself: a Go binary.
func buildGoForFuzz() (string, error) { return testBinary() }

func TestParsePclntabErrors(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("\xf1\xff\xff\xff"), []byte("\xf1\xff\xff\xff\x00\x00\x01\x03xxxxxxxx"),
		// A big-endian Go 1.16 header counting 16M functions (2.4 GB in gosym).
		[]byte("\xff\xff\xff\xfa\x00\x00\x01\x04\x01\x00\x00\x000000")} {
		_, err := parsePclntab(in, 0)
		require.Error(t, err)
	}
}
