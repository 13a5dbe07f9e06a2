package probes

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
			entry: []symOffset{{"work:start", 0x143a, 0x3062}},
			exit:  []symOffset{{"work:done", 0x147d, 0x3060}, {"work:done", 0x1490, 0x3060}},
		},
		{
			name: "no semaphore", notes: notes, spec: Spec{EntryUSDT: "other:start", ExitUSDT: "work:start"},
			entry: []symOffset{{"other:start", 0x1500, 0}}, exit: []symOffset{{"work:start", 0x143a, 0x3062}},
		},
		{name: "no exit probe", notes: notes, spec: Spec{EntryUSDT: "work:start", ExitUSDT: "work:nosuch"}, missing: "work:nosuch"},
		{name: "no entry probe", notes: notes, spec: Spec{EntryUSDT: "nosuch:start", ExitUSDT: "work:done"}, missing: "nosuch:start"},
		{name: "no notes", notes: fileNotes{err: usdt.ErrNoProbes}, spec: pair, missing: "work:start"},
		{name: "Go binary", notes: fileNotes{err: errGoUSDT}, spec: pair, err: errGoUSDT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entry, exit, missing, err := tt.notes.usdtSites(tt.spec)
			require.Equal(t, tt.missing, missing)
			require.ErrorIs(t, err, tt.err)
			if tt.missing == "" && tt.err == nil {
				require.Equal(t, tt.entry, entry)
				require.Equal(t, tt.exit, exit)
			}
		})
	}
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
