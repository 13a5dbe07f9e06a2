package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"
)

// TestDefinesMatchesDebugELF looks up every dynamic symbol of this
// machine's real files (node's 74k among them; the test's own, linked by
// Go, has a System V hash table) and names they do not define, against
// debug/elf's whole decode; files with both hash tables through each.
func TestDefinesMatchesDebugELF(t *testing.T) {
	self, _ := os.Executable()
	files := []string{"/usr/bin/node", "/usr/bin/xz", "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
		"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6", self}
	tested := 0
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		defer f.Close()
		all, allErr := f.DynamicSymbols()
		_, err = Defines(f, "malloc")
		if allErr != nil {
			if !errors.Is(err, elf.ErrNoSymbols) {
				t.Errorf("%s: err %v, debug/elf %v", path, err, allErr)
			}
			continue
		}
		tested++
		defined, undefined := map[string]bool{}, map[string]bool{}
		for _, s := range all {
			if s.Section != elf.SHN_UNDEF {
				defined[s.Name] = true
			} else {
				undefined[s.Name] = true
			}
		}
		absent := []string{"", "gHotSpotVMStructs_", "_PyRuntimeX", "no such symbol", "malloc\x00"}
		for name := range undefined {
			if !defined[name] {
				absent = append(absent, name)
			}
		}
		for _, table := range hashTables(f) {
			for name := range defined {
				if ok, err := Defines(table.f, name); !ok || err != nil {
					t.Fatalf("%s (%s): %q defined, Defines says %v, %v", path, table.name, name, ok, err)
				}
			}
			for _, name := range absent {
				if ok, err := Defines(table.f, name); ok || err != nil {
					t.Fatalf("%s (%s): %q not defined, Defines says %v, %v", path, table.name, name, ok, err)
				}
			}
			t.Logf("%s (%s): %d defined, %d absent looked up", path, table.name, len(defined), len(absent))
		}
	}
	if tested < 3 {
		t.Fatalf("only %d of %q have dynamic symbols here", tested, files)
	}
}

// TestDefinesBadInput: a file without a hash table or dynamic symbols
// says so; a malformed hash table is an error, never a panic or a loop.
func TestDefinesBadInput(t *testing.T) {
	if _, err := Defines(table(t, "\x00abc\x00", 1), "abc"); !errors.Is(err, ErrNoHashTable) {
		t.Errorf("no .gnu.hash: %v", err)
	}
	f := table(t, "\x00abc\x00", 1)
	f.Sections = f.Sections[:1]
	if _, err := Defines(f, "abc"); !errors.Is(err, elf.ErrNoSymbols) {
		t.Errorf("no .dynsym: %v", err)
	}
	for name, hash := range map[string][]byte{
		"short header":            {1, 0, 0, 0},
		"no buckets":              gnuHashBytes(0, 1, 1, 0, []uint64{^uint64(0)}, nil, nil),
		"bucket past the table":   gnuHashBytes(1, 1, 1, 0, []uint64{^uint64(0)}, []uint32{7}, nil),
		"bucket before symoffset": gnuHashBytes(1, 5, 1, 0, []uint64{^uint64(0)}, []uint32{1}, nil),
		"endless chain":           gnuHashBytes(1, 1, 1, 0, []uint64{^uint64(0)}, []uint32{1}, make([]uint32, 2*maxChain)),
	} {
		_, err := Defines(withGNUHash(t, hash), "abc")
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestDefinesSynthetic builds the hash table of a small table and finds
// its names, also with every bloom bit set (the chain decides).
func TestDefinesSynthetic(t *testing.T) {
	h := gnuHashOf("abc")
	bloom := uint64(1)<<(h%64) | uint64(1)<<((h>>6)%64)
	for name, b := range map[string][]uint64{"bloom": {bloom}, "all bits": {^uint64(0)}} {
		f := withGNUHash(t, gnuHashBytes(1, 1, 1, 6, b, []uint32{1}, []uint32{h | 1}))
		for _, tc := range []struct {
			name string
			want bool
		}{{"abc", true}, {"abd", false}, {"ab", false}} {
			if got, err := Defines(f, tc.name); got != tc.want || err != nil {
				t.Errorf("%s: Defines(%q) = %v, %v", name, tc.name, got, err)
			}
		}
	}
}

// gnuHashBytes is a .gnu.hash section of a 64-bit little-endian file.
func gnuHashBytes(nbuckets, symoffset, bloomWords, shift uint32, bloom []uint64, buckets, chains []uint32) []byte {
	var b []byte
	for _, v := range []uint32{nbuckets, symoffset, bloomWords, shift} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	for _, w := range bloom {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	for _, v := range append(buckets, chains...) {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// withHash is table's file of one symbol, "abc", with hash as its hash
// section of type typ (SHT_GNU_HASH or SHT_HASH).
func withHash(t *testing.T, typ elf.SectionType, hash []byte) *elf.File {
	f := table(t, "\x00abc\x00", 1)
	f.Sections = append(f.Sections, &elf.Section{
		SectionHeader: elf.SectionHeader{Name: typ.String(), Type: typ, Link: 1, Size: uint64(len(hash))},
		ReaderAt:      bytes.NewReader(hash),
	})
	return f
}

func withGNUHash(t *testing.T, hash []byte) *elf.File  { return withHash(t, elf.SHT_GNU_HASH, hash) }
func withSysVHash(t *testing.T, hash []byte) *elf.File { return withHash(t, elf.SHT_HASH, hash) }

// hashTables returns f as each of its hash tables alone would have it
// looked up: a table's type set to SHT_NULL hides it.
func hashTables(f *elf.File) []struct {
	name string
	f    *elf.File
} {
	var out []struct {
		name string
		f    *elf.File
	}
	for _, typ := range []elf.SectionType{elf.SHT_GNU_HASH, elf.SHT_HASH} {
		if !slices.ContainsFunc(f.Sections, func(s *elf.Section) bool { return s.Type == typ }) {
			continue
		}
		only := *f
		only.Sections = slices.Clone(f.Sections)
		for i, s := range only.Sections {
			if (s.Type == elf.SHT_GNU_HASH || s.Type == elf.SHT_HASH) && s.Type != typ {
				hidden := *s
				hidden.Type = elf.SHT_NULL
				only.Sections[i] = &hidden
			}
		}
		out = append(out, struct {
			name string
			f    *elf.File
		}{typ.String(), &only})
	}
	return out
}

// sysvHashBytes is a .hash section of a little-endian file.
func sysvHashBytes(buckets, chains []uint32) []byte {
	var b []byte
	for _, v := range append([]uint32{uint32(len(buckets)), uint32(len(chains))}, append(buckets, chains...)...) {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestDefinesSysV(t *testing.T) {
	// One bucket: symbol 1 ("abc") heads its chain, which ends there.
	f := withSysVHash(t, sysvHashBytes([]uint32{1}, []uint32{0, 0}))
	for name, want := range map[string]bool{"abc": true, "abd": false, "": false} {
		if got, err := Defines(f, name); got != want || err != nil {
			t.Errorf("Defines(%q) = %v, %v", name, got, err)
		}
	}
	for name, hash := range map[string][]byte{
		"no buckets":        sysvHashBytes(nil, []uint32{0, 0}),
		"past the chains":   sysvHashBytes([]uint32{5}, []uint32{0, 0}),
		"a chain in a loop": sysvHashBytes([]uint32{1}, []uint32{0, 1}),
		"short":             {1, 0},
	} {
		if _, err := Defines(withSysVHash(t, hash), "abd"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
