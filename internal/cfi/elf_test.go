package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// fixtureELF returns the bytes of a real x86-64 executable and its table.
func fixtureELF(t *testing.T) ([]byte, *Table) {
	t.Helper()
	const path = "/usr/bin/xz"
	data, err := os.ReadFile(path)
	if err != nil {
		testutil.SkipOrFail(t, "%s: %v", path, err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	table, err := Build(f)
	require.NoError(t, err)
	require.NotEmpty(t, table.Rows)
	return data, table
}

// ELF64 header fields patched by these tests.
const (
	ehMachine     = 0x12
	ehShoff       = 0x28
	ehShnum       = 0x3c
	shdrSize      = 64
	shdrSizeOff   = 0x20
	shdrOffsetOff = 0x18
)

// withoutSectionHeaders returns a copy of data whose ELF header points at
// no section headers, as in files stripped of them.
func withoutSectionHeaders(data []byte) []byte {
	out := bytes.Clone(data)
	clear(out[ehShoff : ehShoff+8])
	clear(out[0x3a:0x40]) // e_shentsize, e_shnum, e_shstrndx
	return out
}

func TestBuildWithoutSectionHeaders(t *testing.T) {
	data, want := fixtureELF(t)
	stripped := withoutSectionHeaders(data)

	// Through the .eh_frame_hdr search table, then (table encoding
	// "omitted") by walking .eh_frame up to its terminator.
	noTable := bytes.Clone(stripped)
	f, err := elf.NewFile(bytes.NewReader(noTable))
	require.NoError(t, err)
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			noTable[p.Off+3] = peOmit
		}
	}
	for name, variant := range map[string][]byte{"search table": stripped, "walk": noTable} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.NewFile(bytes.NewReader(variant))
			require.NoError(t, err)
			require.Empty(t, f.Sections)
			got, err := Build(f)
			require.NoError(t, err)
			require.Equal(t, want.Rows, got.Rows)
			require.Equal(t, want.Stats.FDEs, got.Stats.FDEs)
		})
	}
}

func TestBuildHostileELF(t *testing.T) {
	data, _ := fixtureELF(t)
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	ehIndex := -1
	for i, s := range f.Sections {
		if s.Name == ".eh_frame" {
			ehIndex = i
		}
	}
	require.GreaterOrEqual(t, ehIndex, 0)
	shoff := binary.LittleEndian.Uint64(data[ehShoff:])

	huge := bytes.Clone(data)
	binary.LittleEndian.PutUint64(huge[shoff+uint64(ehIndex)*shdrSize+shdrSizeOff:], 1<<40)
	arm := bytes.Clone(data) // x86-64 code and CFI read as aarch64's
	binary.LittleEndian.PutUint16(arm[ehMachine:], uint16(elf.EM_AARCH64))
	riscv := bytes.Clone(data)
	binary.LittleEndian.PutUint16(riscv[ehMachine:], uint16(elf.EM_RISCV))
	pastEnd := bytes.Clone(data)
	binary.LittleEndian.PutUint64(pastEnd[shoff+uint64(ehIndex)*shdrSize+shdrOffsetOff:], uint64(len(data)-16))
	var misplaced, garbled []byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			misplaced = withoutSectionHeaders(data)
			binary.LittleEndian.PutUint32(misplaced[p.Off+4:], 0x7ff00000) // .eh_frame_ptr
			garbled = withoutSectionHeaders(data)
			for i := p.Off + 12; i < p.Off+p.Filesz; i += 7 {
				garbled[i] ^= 0x5a // search table entries
			}
		}
	}

	tests := []struct {
		name string
		data []byte
	}{
		{"huge .eh_frame", huge},
		{"x86-64 read as aarch64", arm},
		{"neither x86-64 nor aarch64", riscv},
		{".eh_frame past the end of the file", pastEnd},
		{".eh_frame_hdr pointing nowhere", misplaced},
		{".eh_frame_hdr table garbled", garbled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := elf.NewFile(bytes.NewReader(tt.data))
			if err != nil {
				return // debug/elf refused it: nothing for Build to do
			}
			table, err := Build(f)
			if err == nil {
				checkInvariants(t, table)
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		for _, bad := range [][]byte{huge, riscv} {
			f, err := elf.NewFile(bytes.NewReader(bad))
			require.NoError(t, err)
			_, err = Build(f)
			require.Error(t, err)
		}
	})
}

// TestBuildSeparateDebugFile: a debug file's .eh_frame is NOBITS and its
// PT_GNU_EH_FRAME points at nothing; it has no CFI of its own to give.
func TestBuildSeparateDebugFile(t *testing.T) {
	lib, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	defer lib.Close()
	notes := lib.Section(".note.gnu.build-id")
	require.NotNil(t, notes)
	data, err := notes.Data()
	require.NoError(t, err)
	id := hex.EncodeToString(data[16:]) // after namesz, descsz, type and "GNU\0"
	path := "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
	f, err := elf.Open(path)
	if err != nil {
		testutil.SkipOrFail(t, "no debug file (libc6-dbg): %v", err)
	}
	defer f.Close()
	require.Equal(t, elf.SHT_NOBITS, f.Section(".eh_frame").Type)
	table, err := Build(f)
	require.NoError(t, err)
	require.Empty(t, table.Rows)
}
