package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// buildDynLib compiles testdata/dynlib.c into a shared library with the
// given hash table style ("gnu", "sysv" or "both").
func buildDynLib(tb testing.TB, hashStyle string, flags ...string) ([]byte, error) {
	tb.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		return nil, err
	}
	src, err := filepath.Abs(filepath.Join("testdata", "dynlib.c"))
	if err != nil {
		return nil, err
	}
	out := filepath.Join(tb.TempDir(), "libdyn-"+hashStyle+".so")
	args := append([]string{"-shared", "-fPIC", "-O0", "-Wl,--hash-style=" + hashStyle, "-o", out, src}, flags...)
	cmd := exec.Command("cc", args...)
	if b, err := testutil.RunWithin(cmd, testutil.Patient(testutil.BuildTimeout)); err != nil {
		return nil, &exec.Error{Name: string(b), Err: err}
	}
	return os.ReadFile(out)
}

// corruptions damage the section header fields of an ELF64 header.
var corruptions = []struct {
	name  string
	apply func(b []byte)
}{
	{"shoff past the end", func(b []byte) { binary.LittleEndian.PutUint64(b[0x28:], 1<<40) }},
	{"shoff negative", func(b []byte) { binary.LittleEndian.PutUint64(b[0x28:], 1<<63) }},
	{"shnum huge", func(b []byte) { binary.LittleEndian.PutUint16(b[0x3c:], 0xfff0) }},
	{"shentsize too small", func(b []byte) { binary.LittleEndian.PutUint16(b[0x3a:], 7) }},
	{"shstrndx out of range", func(b []byte) { binary.LittleEndian.PutUint16(b[0x3e:], 0xfff0) }},
	{"all zeroed", func(b []byte) {
		clear(b[0x28:0x30])
		clear(b[0x3a:0x40])
	}},
}

// A binary whose section header table is corrupt still symbolizes its
// exported functions through PT_DYNAMIC, with either hash table.
func TestCorruptSectionHeadersUseDynamicSymbols(t *testing.T) {
	for _, style := range []string{"gnu", "sysv", "both"} {
		lib, err := buildDynLib(t, style)
		if err != nil {
			t.Skipf("cannot build a shared library: %v", err)
		}
		// The truth, from the intact file.
		f, err := elf.NewFile(bytes.NewReader(lib))
		require.NoError(t, err)
		syms, err := f.DynamicSymbols()
		require.NoError(t, err)
		want := map[string]elf.Symbol{}
		for _, s := range syms {
			if s.Name == "exported_fn" || s.Name == "exported_other" {
				want[s.Name] = s
			}
		}
		require.Len(t, want, 2)
		intact, err := findFunctions(lib, func(string) bool { return true })
		require.NoError(t, err)

		for _, c := range corruptions {
			t.Run(style+"/"+c.name, func(t *testing.T) {
				data := append([]byte(nil), lib...)
				c.apply(data)
				ef, err := parseELF(data)
				require.NoError(t, err)
				for name, s := range want {
					assert.Equal(t, name, ef.symbol(s.Value), "entry of %s", name)
					assert.Equal(t, name, ef.symbol(s.Value+s.Size-1), "last byte of %s", name)
				}
				assert.NotEmpty(t, ef.buildIDGNU, "build id from PT_NOTE")

				got, err := findFunctions(data, func(n string) bool { return want[n].Name != "" })
				require.NoError(t, err)
				require.Len(t, got.Symbols, 2)
				for _, g := range got.Symbols {
					assert.Equal(t, want[g.Name].Value, g.Value)
					for _, i := range intact.Symbols {
						if i.Name == g.Name {
							assert.Equal(t, i.Offset, g.Offset, "file offset of %s", g.Name)
						}
					}
				}
			})
		}
	}
}

// Counts and offsets of the dynamic segment are checked against the file.
func TestDynamicSymbolsBounds(t *testing.T) {
	lib, err := buildDynLib(t, "gnu")
	if err != nil {
		t.Skipf("cannot build a shared library: %v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(lib))
	require.NoError(t, err)
	var dyn *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p
		}
	}
	require.NotNil(t, dyn)
	// Corrupt the value of every dynamic entry in turn: no panic, and an
	// error or a table within the file.
	for off := dyn.Off; off+16 <= dyn.Off+dyn.Filesz; off += 16 {
		for _, v := range []uint64{0, 1 << 62, uint64(len(lib)) - 1, ^uint64(0)} {
			data := append([]byte(nil), lib...)
			binary.LittleEndian.PutUint64(data[off+8:], v)
			clear(data[0x28:0x30])
			clear(data[0x3a:0x40])
			ef, _, err := newELF(data)
			require.NoError(t, err)
			raw, ok, err := dynamicSymbols(ef, data)
			if err != nil || !ok {
				continue
			}
			tab := functionTable(raw)
			tab.lookup(0x1000)
		}
	}
}

// FuzzDynamicSymbols feeds mutated shared libraries without section
// headers to the PT_DYNAMIC reader: it must never panic and never index
// outside the file.
func FuzzDynamicSymbols(f *testing.F) {
	// The seeds in testdata/fuzz/FuzzDynamicSymbols are testdata/dynlib.c
	// built with each hash style, small (cc -shared -fPIC -O0 -nostdlib -s
	// -Wl,--hash-style=gnu|sysv,-z,max-page-size=16,-z,common-page-size=16,
	// -z,norelro,-z,noseparate-code), cut after the last segment and with
	// e_shoff, e_shentsize, e_shnum and e_shstrndx zeroed.
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ef *elf.File
		func() {
			defer func() { _ = recover() }() // debug/elf's own panics are not ours
			ef, _, _ = newELF(data)
		}()
		if ef == nil {
			return
		}
		raw, ok, err := dynamicSymbols(ef, data)
		if err != nil || !ok {
			return
		}
		tab := functionTable(raw)
		for _, e := range tab.entries[:min(len(tab.entries), 16)] {
			tab.lookup(e.addr)
		}
	})
}
