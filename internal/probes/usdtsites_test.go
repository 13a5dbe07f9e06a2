package probes

import (
	"debug/elf"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

func TestUSDTSites(t *testing.T) {
	notes := fileNotes{sites: []usdt.Probe{
		{Provider: "work", Name: "start", Offset: 0x143a, SemaphoreOffset: 0x3062},
		{Provider: "work", Name: "done", Offset: 0x147d, SemaphoreOffset: 0x3060},
		{Provider: "other", Name: "start", Offset: 0x1500},
		{Provider: "work", Name: "done", Offset: 0x1490, SemaphoreOffset: 0x3060},
	}}
	pair := Spec{EntryUSDT: "work:start", ExitUSDT: "work:done"}
	tests := []struct {
		name        string
		notes       fileNotes
		spec        Spec
		entry, exit []symOffset
		missing     string
		err         error
	}{
		{
			name: "every site, with its semaphore", notes: notes, spec: pair,
			entry: []symOffset{{name: "work:start", offset: 0x143a, refCtr: 0x3062}},
			exit:  []symOffset{{name: "work:done", offset: 0x147d, refCtr: 0x3060}, {name: "work:done", offset: 0x1490, refCtr: 0x3060}},
		},
		{
			name: "no semaphore", notes: notes, spec: Spec{EntryUSDT: "other:start", ExitUSDT: "work:start"},
			entry: []symOffset{{name: "other:start", offset: 0x1500, refCtr: 0}}, exit: []symOffset{{name: "work:start", offset: 0x143a, refCtr: 0x3062}},
		},
		{name: "no exit probe", notes: notes, spec: Spec{EntryUSDT: "work:start", ExitUSDT: "work:nosuch"}, missing: "work:nosuch"},
		{name: "no entry probe", notes: notes, spec: Spec{EntryUSDT: "nosuch:start", ExitUSDT: "work:done"}, missing: "nosuch:start"},
		{name: "no notes", notes: fileNotes{err: usdt.ErrNoProbes}, spec: pair, missing: "work:start"},
		{name: "Go binary", notes: fileNotes{err: errGoUSDT}, spec: pair, err: errGoUSDT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entry, exit, missing, err := tt.notes.usdtSites(tt.spec, nil)
			require.Equal(t, tt.missing, missing)
			require.ErrorIs(t, err, tt.err)
			if tt.missing == "" && tt.err == nil {
				require.Equal(t, tt.entry, entry)
				require.Equal(t, tt.exit, exit)
			}
		})
	}
}

// Each entry site gets the fetch of the attributes' arguments from its
// own specs (two sites of one probe keep them in different places); a
// spec the fetch cannot do, an argument the probe lacks or a string
// whose address is not 8 bytes refuses the file's probe.
func TestUSDTSitesArguments(t *testing.T) {
	notes := func(entrySpecs ...string) fileNotes {
		n := fileNotes{machine: elf.EM_X86_64, sites: []usdt.Probe{{Provider: "p", Name: "done", Offset: 0x2000}}}
		for i, s := range entrySpecs {
			n.sites = append(n.sites, usdt.Probe{Provider: "p", Name: "start", Offset: uint64(0x1000 + i), ArgSpecs: s})
		}
		return n
	}
	spec := Spec{EntryUSDT: "p:start", ExitUSDT: "p:done"}
	attrs := []Attribute{{Name: "a", Arg: 2}, {Name: "q", Arg: 0, String: true}, {Name: "z", Arg: 1}}
	rsi := bpf.ProbeUsdtArgSpec{Kind: usdtArgRegister, RegOff: 104, Size: 8}
	q := bpf.ProbeUsdtArgSpec{Kind: usdtArgRegister, RegOff: 112, Size: 8, String: 1}
	mem := bpf.ProbeUsdtArgSpec{Kind: usdtArgMemory, RegOff: 32, Value: -20, Size: 4, IsSigned: 1}
	konst := bpf.ProbeUsdtArgSpec{Kind: usdtArgConst, Value: 7, Size: 4, IsSigned: 1}

	entry, _, missing, err := notes("8@%rdi -4@-20(%rbp) 8@%rsi", "8@%rdi -4@$7 -4@-20(%rbp)").usdtSites(spec, attrs)
	require.NoError(t, err)
	require.Empty(t, missing)
	require.Len(t, entry, 2)
	require.Equal(t, &bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{rsi, q, mem}}, entry[0].args)
	require.Equal(t, &bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{mem, q, konst}}, entry[1].args)

	for _, tt := range []struct{ name, specs, err string }{
		{"too few arguments", "8@%rdi 8@%rsi", "attribute a: argument 2 of a probe with 2"},
		{"an index register", "8@%rdi 8@%rsi 8@(%rax,%rbx,8)", "attribute a: argument 2"},
		{"a 4-byte string address", "4@%edi 8@%rsi 8@%rdx", "a string's address is 8 bytes, not 4"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := notes("8@%rdi 8@%rsi 8@%rdx", tt.specs).usdtSites(spec, attrs)
			require.ErrorContains(t, err, tt.err)
			require.ErrorContains(t, err, "p:start at 0x1001")
		})
	}
}

// Sites that fetch the same way share one usdt_specs entry; the map's
// bound refuses more.
func TestUSDTArgSpecs(t *testing.T) {
	var put []uint32
	u := newUSDTArgSpecs(func(i uint32, _ *bpf.ProbeUsdtArgsSpec) error { put = append(put, i); return nil })
	a := &bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{{Kind: usdtArgRegister, RegOff: 112, Size: 8}}}
	b := &bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{{Kind: usdtArgConst, Value: 1, Size: 4}}}
	for _, want := range []struct {
		s *bpf.ProbeUsdtArgsSpec
		c uint32
	}{{a, 1}, {b, 2}, {a, 1}, {b, 2}} {
		c, err := u.cookie(want.s)
		require.NoError(t, err)
		require.Equal(t, want.c, c)
	}
	require.Equal(t, []uint32{0, 1}, put)
	for i := range maxUSDTArgSpecs - 2 {
		_, err := u.cookie(&bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{{Kind: usdtArgConst, Value: int64(i + 2)}}})
		require.NoError(t, err)
	}
	_, err := u.cookie(&bpf.ProbeUsdtArgsSpec{Args: [4]bpf.ProbeUsdtArgSpec{{Kind: usdtArgConst, Value: -1}}})
	require.ErrorContains(t, err, "more than 1024")
}

// A Go binary's USDT probes are refused before its notes are read; a file
// that is not ELF is refused.
func TestReadNotes(t *testing.T) {
	path, err := os.Executable() // this test, a Go binary
	require.NoError(t, err)
	self, err := os.Open(path)
	require.NoError(t, err)
	defer self.Close()
	require.ErrorIs(t, readNotes(self).err, errGoUSDT)

	n := readNotes(strings.NewReader("not an ELF file"))
	require.Error(t, n.err)
	require.False(t, errors.Is(n.err, usdt.ErrNoProbes))
}
