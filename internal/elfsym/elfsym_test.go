package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// table is a synthetic ELF with one symbol table: strs is its string
// table, names the name offsets of its symbols 1.. (value = index*16).
func table(t *testing.T, strs string, names ...uint32) *elf.File {
	t.Helper()
	var sym bytes.Buffer
	sym.Write(make([]byte, elf.Sym64Size)) // the null symbol
	for i, n := range names {
		if err := binary.Write(&sym, binary.LittleEndian, elf.Sym64{
			Name: n, Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Shndx: 1,
			Value: uint64(i+1) * 16, Size: 4,
		}); err != nil {
			t.Fatal(err)
		}
	}
	section := func(name string, typ elf.SectionType, link uint32, data []byte) *elf.Section {
		return &elf.Section{
			SectionHeader: elf.SectionHeader{Name: name, Type: typ, Link: link, Size: uint64(len(data))},
			ReaderAt:      bytes.NewReader(data),
		}
	}
	return &elf.File{
		FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, ByteOrder: binary.LittleEndian},
		Sections: []*elf.Section{
			section("", elf.SHT_NULL, 0, nil),
			section(".dynsym", elf.SHT_DYNSYM, 2, sym.Bytes()),
			section(".dynstr", elf.SHT_STRTAB, 0, []byte(strs)),
		},
	}
}

func names(syms []Symbol) []string {
	var out []string
	for _, s := range syms {
		out = append(out, s.Name)
	}
	return out
}

func TestLookupSynthetic(t *testing.T) {
	// Offsets: v8dbg_a 1, xv8dbg_b 9 (its tail v8dbg_b 10), Py_Version
	// 18, notPy_Version 29 (its tail Py_Version 32).
	strs := "\x00v8dbg_a\x00xv8dbg_b\x00Py_Version\x00notPy_Version\x00"
	f := table(t, strs, 1, 9, 10, 18, 29, 32)
	tests := []struct {
		name      string
		m         Match
		want      []string
		wantIndex []int
	}{
		{"prefix, a tail-merged name included", Match{Prefixes: []string{"v8dbg_"}}, []string{"v8dbg_a", "v8dbg_b"}, []int{1, 3}},
		{"exact name, also as the tail of another", Match{Names: []string{"Py_Version"}}, []string{"Py_Version", "Py_Version"}, []int{4, 6}},
		{"exact name is not a prefix", Match{Names: []string{"Py_Vers"}}, nil, nil},
		{"both", Match{Names: []string{"notPy_Version"}, Prefixes: []string{"v8dbg_b"}}, []string{"v8dbg_b", "notPy_Version"}, []int{3, 5}},
		{"nothing asked", Match{}, nil, nil},
		{"a NUL in a pattern matches nothing", Match{Names: []string{"Py_Version\x00"}, Prefixes: []string{"v8\x00"}}, nil, nil},
		{"an empty prefix: every name", Match{Prefixes: []string{""}},
			[]string{"v8dbg_a", "xv8dbg_b", "v8dbg_b", "Py_Version", "notPy_Version", "Py_Version"}, []int{1, 2, 3, 4, 5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(f, elf.SHT_DYNSYM, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(got), tt.want) {
				t.Fatalf("names %q, want %q", names(got), tt.want)
			}
			for i, s := range got {
				if s.Index != tt.wantIndex[i] || s.Value != uint64(s.Index)*16 || s.Size != 4 || s.Section != 1 {
					t.Errorf("%s: index %d value %#x size %d section %d", s.Name, s.Index, s.Value, s.Size, s.Section)
				}
			}
		})
	}
}

func TestLookupAcrossChunks(t *testing.T) {
	// A name straddling the first chunk boundary is found once.
	pad := strings.Repeat("z", chunk-3) // "v8dbg_" starts at chunk-1, across the boundary
	strs := "\x00" + pad + "\x00v8dbg_across\x00"
	f := table(t, strs, uint32(len(pad)+2))
	got, err := Lookup(f, elf.SHT_DYNSYM, Match{Prefixes: []string{"v8dbg_"}})
	if err != nil || !slices.Equal(names(got), []string{"v8dbg_across"}) {
		t.Fatalf("got %q, %v", names(got), err)
	}
}

func TestLookupBadInput(t *testing.T) {
	tests := []struct {
		name string
		f    *elf.File
		m    Match
		want error
	}{
		{"no table", &elf.File{}, Match{Names: []string{"x"}}, elf.ErrNoSymbols},
		{"too many candidates", table(t, strings.Repeat("ab", MaxCandidates+1)), Match{Prefixes: []string{"a"}}, ErrTooMany},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Lookup(tt.f, elf.SHT_DYNSYM, tt.m); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("name offset past the table, name without NUL", func(t *testing.T) {
		f := table(t, "\x00abc", 1, 900)
		got, err := Lookup(f, elf.SHT_DYNSYM, Match{Prefixes: []string{"ab"}})
		if err != nil || len(got) != 0 {
			t.Fatalf("got %q, %v", names(got), err)
		}
	})
	t.Run("string table link out of range", func(t *testing.T) {
		f := table(t, "\x00abc\x00", 1)
		f.Sections[1].Link = 7
		if _, err := Lookup(f, elf.SHT_DYNSYM, Match{Names: []string{"abc"}}); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("err %v", err)
		}
	})
}

// TestLookupMatchesDebugELF compares Lookup with debug/elf's whole decode
// on the real files of this machine.
func TestLookupMatchesDebugELF(t *testing.T) {
	self, _ := os.Executable()
	files := []string{"/usr/bin/node", "/usr/bin/xz", "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", self}
	if libs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libc.so.6"); len(libs) > 0 {
		files = append(files, libs...)
	}
	matches := []Match{
		{Prefixes: []string{"v8dbg_", "_ZN2v88internal7Version6m"}},
		{Names: []string{"gHotSpotVMStructs", "gHotSpotVMTypes", "malloc", "runtime.tlsg", "main.main"}},
		{Prefixes: []string{"runtime.g"}, Names: []string{"lzma_code"}},
	}
	tested := 0
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		defer f.Close()
		tested++
		for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
			all, allErr := f.DynamicSymbols()
			if typ == elf.SHT_SYMTAB {
				all, allErr = f.Symbols()
			}
			for _, m := range matches {
				got, err := Lookup(f, typ, m)
				if allErr != nil {
					if !errors.Is(err, elf.ErrNoSymbols) {
						t.Errorf("%s %v: err %v, debug/elf %v", path, typ, err, allErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s %v: %v", path, typ, err)
				}
				var want []Symbol
				for i, s := range all {
					if matched(s.Name, m) {
						want = append(want, Symbol{Symbol: elf.Symbol{Name: s.Name, Info: s.Info, Other: s.Other,
							Section: s.Section, Value: s.Value, Size: s.Size}, Index: i + 1})
					}
				}
				if !slices.EqualFunc(got, want, func(a, b Symbol) bool { return a == b }) {
					t.Errorf("%s %v %+v: %d symbols, debug/elf %d", path, typ, m, len(got), len(want))
				}
			}
		}
	}
	if tested < 2 {
		t.Fatalf("only %d of %q could be opened", tested, files)
	}
}

func matched(name string, m Match) bool {
	// A name holds no NUL, and its table keeps none: a pattern with one matches nothing.
	return slices.Contains(m.Names, name) ||
		slices.ContainsFunc(m.Prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// BenchmarkNodeV8Symbols compares Lookup with debug/elf's DynamicSymbols
// finding node's V8 metadata: allocation per op is the figure to compare.
func BenchmarkNodeV8Symbols(b *testing.B) {
	f, err := elf.Open("/usr/bin/node")
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	m := Match{Prefixes: []string{"v8dbg_", "_ZN2v88internal7Version6m"}}
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if syms, err := Lookup(f, elf.SHT_DYNSYM, m); err != nil || len(syms) == 0 {
				b.Fatal(len(syms), err)
			}
		}
	})
	b.Run("debug-elf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			syms, err := f.DynamicSymbols()
			n := 0
			for _, s := range syms {
				if matched(s.Name, m) {
					n++
				}
			}
			if err != nil || n == 0 {
				b.Fatal(n, err)
			}
		}
	})
}
