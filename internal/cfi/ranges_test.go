package cfi

import (
	"debug/elf"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Every function libc exports starts an FDE range, and the ranges are
// sorted and well formed.
func TestFunctionRanges(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	defer f.Close()
	ranges, err := FunctionRanges(f)
	require.NoError(t, err)
	require.Greater(t, len(ranges), 1000)
	require.True(t, sort.SliceIsSorted(ranges, func(i, j int) bool { return ranges[i].Start < ranges[j].Start }))
	for _, r := range ranges {
		require.Less(t, r.Start, r.End)
	}
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	checked := 0
	for _, s := range syms {
		if s.Name != "malloc" && s.Name != "qsort" && s.Name != "memchr" {
			continue
		}
		i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Start > s.Value }) - 1
		require.GreaterOrEqual(t, i, 0, s.Name)
		require.Equal(t, s.Value, ranges[i].Start, s.Name)
		checked++
	}
	require.Equal(t, 3, checked)

	none, err := FunctionRanges(&elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Machine: elf.EM_X86_64}})
	require.NoError(t, err)
	require.Empty(t, none, "a file without CFI")
}
