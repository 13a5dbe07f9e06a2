package unwinder

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A Go program built as go build does (with .debug_frame): its frames with
// rbp pushed say where, and runtime.systemstack is a stack switch.
func TestGoFrameRows(t *testing.T) {
	f, err := elf.Open(testutil.BuildGo(t, "gohot"))
	require.NoError(t, err)
	defer f.Close()
	require.NotNil(t, f.Section(".debug_frame"))
	table, err := cfi.Build(f)
	require.NoError(t, err)
	plain := append([]cfi.Row(nil), table.Rows...)
	rows := withGoFrames(f, table.Rows)
	require.Len(t, rows, len(plain), "rows are amended in place")

	syms, err := f.Symbols()
	require.NoError(t, err)
	ranges := map[string][2]uint64{}
	for _, s := range syms {
		ranges[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
	}
	kinds := func(name string) (counts map[cfi.Kind]int, pushed int) {
		r, ok := ranges[name]
		require.True(t, ok, name)
		counts = map[cfi.Kind]int{}
		for _, row := range rows {
			if row.PC >= r[0] && row.PC < r[1] {
				counts[row.Kind]++
				if row.Kind == cfi.KindCFA && row.CFAOffset >= 16 {
					pushed++
					assert.Equal(t, int32(-16), row.FPOffset, "%s at %#x", name, row.PC)
				}
			}
		}
		return counts, pushed
	}
	sw, _ := kinds("runtime.systemstack.abi0")
	assert.Positive(t, sw[cfi.KindSwitch], "systemstack switches stacks: %v", sw)
	_, pushed := kinds("runtime.mallocgc")
	assert.Positive(t, pushed, "mallocgc has a frame")

	for i, r := range rows {
		if r.Kind == cfi.KindCFA && plain[i].FPOffset != 0 {
			assert.Equal(t, plain[i], r, "a row that says where rbp is keeps it")
		}
	}
}
