package ruby

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A block is named with its method's class once a frame of the method
// was read through its method entry; not where the method's iseq has two
// classes, nor where its label is not the block's method's.
func TestProcessNamesBlocks(t *testing.T) {
	l := layouts["3.3"]
	for _, c := range []struct {
		name    string
		label   string   // the block's
		methods []uint64 // method entries read before the block's second naming
		want    string
	}{
		{"method read", "block in spin", []uint64{0x32000}, "block in Burner.spin"},
		{"nested block", "block (2 levels) in spin", []uint64{0x32000}, "block (2 levels) in Burner.spin"},
		{"method not read", "block in spin", nil, "block in spin"},
		{"another method's label", "block in work", []uint64{0x32000}, "block in work"},
		{"two classes", "block in spin", []uint64{0x32000, 0x3a000}, "block in spin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fakeSymbols(l, 400, false, map[uint64]string{})
			fakeIseq(m, "spin", 0x9000) // the method's iseq, at 0x1000
			fakeMethods(t, m, l)
			// The block's iseq at 0x40000, its body at 0x41000: the
			// method's, with its own label and local_iseq.
			iseq := make([]byte, 24)
			binary.LittleEndian.PutUint64(iseq, tImemo|imemoIseq<<imemoShift)
			binary.LittleEndian.PutUint64(iseq[l.IseqBody:], 0x41000)
			m[0x40000] = iseq
			body := append(append([]byte{}, m[0x2000]...), make([]byte, 16)...)
			binary.LittleEndian.PutUint64(body[l.BodyLabel:], 0x42000)
			binary.LittleEndian.PutUint64(body[l.BodyLocalIseq:], 0x1000)
			m[0x41000] = body
			m[0x42000] = fakeString(l, c.label)
			// A method entry of the class Integer with the same iseq.
			m[0x3a000] = append([]byte{}, m[0x32000]...)
			binary.LittleEndian.PutUint64(m[0x3a000][l.MethodEntryOwner:], 0x31000)

			p := (&Interpreter{Layout: l}).Process(m, 0)
			now := time.Unix(1000, 0)
			fr, err := p.Read(0x40000, 3, now)
			require.NoError(t, err)
			require.Equal(t, c.label, fr.Function, "before its method is read")
			for _, me := range c.methods {
				_, err := p.Read(me, 3, now)
				require.NoError(t, err)
			}
			fr, ok := p.Cached(0x40000, 3, now)
			require.True(t, ok)
			require.Equal(t, c.want, fr.Function)
			require.EqualValues(t, 8, fr.Line)
		})
	}
}
