package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzLookup looks names up in made-up string tables and symbol name
// offsets: every symbol returned must be one whose name, read from its own
// offset, the match asks for, and none may be missed.
func FuzzLookup(f *testing.F) {
	f.Add([]byte("\x00v8dbg_a\x00xv8dbg_b\x00Py_Version\x00"), []byte{1, 0, 0, 0, 10, 0, 0, 0, 18, 0, 0, 0}, "v8dbg_", "Py_Version")
	f.Add([]byte("\x00abc"), []byte{1, 0, 0, 0, 200, 0, 0, 0}, "ab", "abc")
	f.Add([]byte{}, []byte{0, 0, 0, 0}, "", "")
	f.Fuzz(func(t *testing.T, strs, offsets []byte, prefix, name string) {
		if len(prefix) > maxName || len(name) > maxName {
			return
		}
		var names []uint32
		for i := 0; i+4 <= len(offsets) && len(names) < 256; i += 4 {
			names = append(names, binary.LittleEndian.Uint32(offsets[i:]))
		}
		m := Match{Prefixes: []string{prefix}, Names: []string{name}}
		got, err := Lookup(table(t, string(strs), names...), elf.SHT_DYNSYM, m)
		if errors.Is(err, ErrTooMany) {
			return // past the bounds
		}
		if err != nil {
			t.Fatal(err)
		}
		// The oracle: each symbol's NUL-terminated name at its offset.
		var want []int
		for i, off := range names {
			if uint64(off) >= uint64(len(strs)) {
				continue
			}
			end := bytes.IndexByte(strs[off:], 0)
			if end < 0 || end > maxName {
				continue
			}
			if matched(string(strs[off:int(off)+end]), m) {
				want = append(want, i+1)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d symbols, want %d (%v)", len(got), len(want), want)
		}
		for i, s := range got {
			if s.Index != want[i] || !matched(s.Name, m) {
				t.Fatalf("symbol %d: index %d name %q, want index %d", i, s.Index, s.Name, want[i])
			}
		}
	})
}

// FuzzDefines looks names up through made-up GNU and System V hash tables over a table
// of one symbol, "abc": never a panic or an endless chain, and a name is
// found only if it is that symbol's.
func FuzzDefines(f *testing.F) {
	h := gnuHashOf("abc")
	f.Add(gnuHashBytes(1, 1, 1, 6, []uint64{^uint64(0)}, []uint32{1}, []uint32{h | 1}), "abc")
	f.Add(gnuHashBytes(3, 0, 2, 40, []uint64{1, 2}, []uint32{0, 1, 9}, []uint32{0, 0, 1}), "x")
	f.Fuzz(func(t *testing.T, hash []byte, name string) {
		for _, f := range []*elf.File{withGNUHash(t, hash), withSysVHash(t, hash)} {
			ok, err := Defines(f, name)
			if ok && (err != nil || name != "abc") {
				t.Fatalf("Defines(%q) = %v, %v", name, ok, err)
			}
		}
	})
}
