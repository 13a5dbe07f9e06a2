package ruby

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeClass31 is 3.1's memory of a method entry at 0x100 owned by the
// class at 0x200 whose instance variables' st_table (at 0x400) holds
// entries (key, record; hash ^0 when deleted marks one deleted) from
// index start; the Strings "Burner" at 0x600 and "Object" at 0x700.
func fakeClass31(tbl uint64, start uint64, entries [][3]uint64) fakeMem {
	l := layouts["3.1"]
	m := fakeMem{}
	word := func(n int, at map[uint32]uint64) []byte {
		b := make([]byte, n)
		for off, v := range at {
			binary.LittleEndian.PutUint64(b[off:], v)
		}
		return b
	}
	m[0x100] = word(48, map[uint32]uint64{0: tImemo | imemoMent<<imemoShift, l.MethodEntryOwner: 0x200})
	m[0x200] = word(40, map[uint32]uint64{0: tClass, l.ClassExt: 0x300})
	m[0x300] = word(64, map[uint32]uint64{l.ClassExtIvTbl: tbl})
	m[0x400] = word(56, map[uint32]uint64{stEntriesStart: start, stEntriesBound: start + uint64(len(entries)), stEntries: 0x500})
	e := make([]byte, int(start)*stEntrySize)
	for _, x := range entries {
		e = binary.LittleEndian.AppendUint64(e, x[0])
		e = binary.LittleEndian.AppendUint64(e, x[1])
		e = binary.LittleEndian.AppendUint64(e, x[2])
	}
	m[0x500] = e
	str := func(s string) []byte {
		b := word(40, map[uint32]uint64{0: tString | uint64(len(s))<<l.StringEmbedShift})
		copy(b[l.StringEmbed:], s)
		return b
	}
	m[0x600] = str("Burner")
	m[0x700] = str("Object")
	return m
}

func TestClassPath31(t *testing.T) {
	const id = 0xf01
	l := layouts["3.1"]
	for _, c := range []struct {
		name    string
		tbl     uint64
		start   uint64
		entries [][3]uint64
		id      uint64
		want    string // "" for an error
	}{
		{"only entry", 0x400, 0, [][3]uint64{{1, id, 0x600}}, id, "Burner"},
		{"after others and a deleted one", 0x400, 2, [][3]uint64{{1, 0x1231, 0x14}, {stDeleted, id, 0x700}, {1, id, 0x600}}, id, "Burner"},
		{"not there", 0x400, 0, [][3]uint64{{1, 0x1231, 0x600}}, id, ""},
		{"nil path", 0x400, 0, [][3]uint64{{1, id, 0x08}}, id, ""},
		{"no table", 0, 0, nil, id, ""},
		{"empty table", 0x400, 0, nil, id, ""},
		{"too many entries", 0x400, 0, make([][3]uint64, maxIvars+1), id, ""},
		{"no ID", 0x400, 0, [][3]uint64{{1, id, 0x600}}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := l.ClassPath(fakeClass31(c.tbl, c.start, c.entries), 0x100, c.id)
			if c.want == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// ClasspathID is the key of Object's own path, "Object".
func TestClasspathID31(t *testing.T) {
	l := layouts["3.1"]
	m := fakeClass31(0x400, 0, [][3]uint64{{1, 0x1231, 0x600}, {1, 0xf01, 0x700}})
	id, err := l.ClasspathID(m, 0x200)
	require.NoError(t, err)
	require.Equal(t, uint64(0xf01), id)
	_, err = l.ClasspathID(fakeClass31(0x400, 0, [][3]uint64{{1, 0x1231, 0x600}}), 0x200)
	require.Error(t, err)
	_, err = l.ClasspathID(m, 0x100) // a method entry, not a class
	require.Error(t, err)
}
