package symbolize

import (
	"bytes"
	"debug/elf"
	gobuild "go/build"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// toolchainSymbols is the .symtab of the Go compiler the tests are built
// with: tens of thousands of function symbols, no fixture needed (go test
// strips its own binaries).
func toolchainSymbols(tb testing.TB) rawSymbols {
	tb.Helper()
	exe := filepath.Join(gobuild.Default.GOROOT, "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")
	if e := os.Getenv("SYMTAB_FILE"); e != "" {
		exe = e
	}
	data, err := os.ReadFile(exe)
	require.NoError(tb, err)
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(tb, err)
	raw, ok, err := rawSymbolSection(f, data, elf.SHT_SYMTAB)
	require.NoError(tb, err)
	if !ok {
		tb.Fatalf("%s has no .symtab", exe)
	}
	return raw
}

// The table has one entry per address, sorted, and of the symbols at an
// address the largest, the first in the file among equals: what a stable
// sort by address then size gives.
func TestFunctionTableKeepsTheFirstOfEquals(t *testing.T) {
	raw := toolchainSymbols(t)
	type key struct {
		addr uint64
		size uint32
	}
	want := map[uint64]key{}
	wantName := map[uint64]uint32{}
	for i := range raw.len() {
		s := raw.sym(i)
		if !raw.isFunction(s) {
			continue
		}
		k, seen := want[s.value]
		if size := uint32(min(s.size, 1<<32-1)); !seen || size > k.size {
			want[s.value] = key{s.value, size}
			wantName[s.value] = s.name
		}
	}
	got := functionTable(raw)
	require.Len(t, got.entries, len(want))
	for i, e := range got.entries {
		if i > 0 {
			require.Less(t, got.entries[i-1].addr, e.addr)
		}
		require.Equal(t, want[e.addr].size, e.size, "size at %#x", e.addr)
		require.Equal(t, wantName[e.addr], e.name, "name at %#x", e.addr)
	}
}

func BenchmarkFunctionTable(b *testing.B) {
	raw := toolchainSymbols(b)
	b.ReportAllocs()
	for b.Loop() {
		functionTable(raw)
	}
}
