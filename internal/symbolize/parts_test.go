package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/ruby"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func TestJumpTargets(t *testing.T) {
	arm := func(words ...uint32) []byte {
		b := make([]byte, 4*len(words))
		for i, w := range words {
			binary.LittleEndian.PutUint32(b[4*i:], w)
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		machine elf.Machine
		code    []byte
		want    []uint64
	}{
		{"x86 jmp rel32", elf.EM_X86_64, []byte{0xe9, 0x10, 0, 0, 0}, []uint64{0x1015}},
		{"x86 je rel32", elf.EM_X86_64, []byte{0x0f, 0x84, 0, 1, 0, 0}, []uint64{0x1106}},
		{"x86 jmp rel8 backwards", elf.EM_X86_64, []byte{0x90, 0xeb, 0xfd}, []uint64{0x1000}},
		{"x86 call is not a jump", elf.EM_X86_64, []byte{0xe8, 0x10, 0, 0, 0}, nil},
		{"x86 indirect jmp", elf.EM_X86_64, []byte{0xff, 0xe0}, nil},
		{"x86 undecodable byte stepped over", elf.EM_X86_64, []byte{0x0f, 0x0b, 0xe9, 0, 0, 0, 0}, []uint64{0x1007}},
		{"arm64 b", elf.EM_AARCH64, arm(0xd503201f, 0x14000002), []uint64{0x1004 + 8}},
		{"arm64 cbz", elf.EM_AARCH64, arm(0xb4000040), []uint64{0x1008}},
		{"arm64 b.eq", elf.EM_AARCH64, arm(0x54000040), []uint64{0x1008}},
		{"arm64 bl is a call", elf.EM_AARCH64, arm(0x94000002), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, jumpTargets(tc.machine, 0x1000, tc.code))
		})
	}
}

// Debian's CPython 3.14 (PGO, stripped) runs its bytecode in a part of
// _PyEval_EvalFrameDefault placed apart from the function's symbol: the
// symbolizer names it after the function.
func TestSplitPartsNamed(t *testing.T) {
	path := testutil.SidPython(t, "3.14").Path
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ef, err := parseELF(data)
	require.NoError(t, err)
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var eval elf.Symbol
	for _, s := range syms {
		if s.Name == "_PyEval_EvalFrameDefault" {
			eval = s
		}
	}
	require.NotZero(t, eval.Value)
	require.Equal(t, "_PyEval_EvalFrameDefault", ef.symbol(eval.Value))
	require.NotEmpty(t, ef.parts)
	biggest := ef.parts[0]
	for _, p := range ef.parts {
		t.Logf("part %#x-%#x (%d bytes) of %s (%d bytes at %#x)", p.lo, p.hi, p.hi-p.lo, p.name, eval.Size, eval.Value)
		if p.hi-p.lo > biggest.hi-biggest.lo {
			biggest = p
		}
	}
	require.Greater(t, biggest.hi-biggest.lo, 16*eval.Size, "the part that runs the bytecode")
	require.Equal(t, "_PyEval_EvalFrameDefault", ef.symbol((biggest.lo+biggest.hi)/2))
}

// Debian's libruby is stripped: vm_exec_core, whose calls runs of Ruby
// frames replace, has no symbol, and is named from Ruby's own reading of
// the file (ruby.EntryRange); its neighbours keep their names.
func TestUnnamedEntryNamed(t *testing.T) {
	rts := []*runtimes.Runtime{ruby.Runtime}
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			data, err := os.ReadFile(r.Lib)
			require.NoError(t, err)
			ef, err := parseELF(data)
			require.NoError(t, err)
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			start, end, err := ruby.EntryRange(f)
			require.NoError(t, err)
			src := ef.symSrc[len(ef.symSrc)-1]
			require.Equal(t, elf.SHT_DYNSYM, src.typ)
			syms := functionTable(src)
			require.Empty(t, syms.lookup(start), "a symbol names vm_exec_core: the file is not stripped")
			require.True(t, holdsUnnamedEntry(rts, src))
			parts := unnamedEntryParts(rts, f, &syms, src)
			require.Equal(t, []splitPart{{start, end, "vm_exec_core"}}, parts)
			require.Equal(t, "vm_exec_core", partAt(parts, (start+end)/2))
			require.Empty(t, partAt(parts, end))
			require.Equal(t, "vm_exec_core", ef.symbol((start+end)/2), "Ruby is one of all.Runtimes")

			require.False(t, holdsUnnamedEntry([]*runtimes.Runtime{{EntryFunction: "f", Exports: []string{"no_such_export"},
				EntryRange: ruby.EntryRange}}, src))
		})
	}
}
