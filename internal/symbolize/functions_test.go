package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// findFunctionsIn opens path and runs FindFunctions on it.
func findFunctionsIn(t *testing.T, path string, match func(string) bool) (ELFFunctions, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return FindFunctions(f, match)
}

func TestFindFunctionsGoBinary(t *testing.T) {
	bin := buildGo(t)
	res, err := findFunctionsIn(t, bin, func(name string) bool { return name == "main.crunch" || name == "no.such" })
	require.NoError(t, err)
	require.True(t, res.Go)
	require.Len(t, res.Symbols, 1)
	s := res.Symbols[0]
	require.Equal(t, "main.crunch", s.Name)

	// The file offset holds the function's first bytes.
	f, err := os.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	ef, err := elf.NewFile(f)
	require.NoError(t, err)
	text := ef.Section(".text")
	require.NotNil(t, text)
	require.GreaterOrEqual(t, s.Value, text.Addr)
	require.Equal(t, s.Value-text.Addr+text.Offset, s.Offset)
}

func TestFindFunctionsCAliases(t *testing.T) {
	bin := buildC(t, "cc", "aliases.c", "-O1")
	res, err := findFunctionsIn(t, bin, func(name string) bool { return strings.HasPrefix(name, "probe_target") })
	require.NoError(t, err)
	require.False(t, res.Go)
	require.Len(t, res.Symbols, 2)
	require.Equal(t, res.Symbols[0].Offset, res.Symbols[1].Offset, "an alias shares its target's offset")
	require.Equal(t, []string{"probe_target", "probe_target_alias"}, []string{res.Symbols[0].Name, res.Symbols[1].Name})
}

func TestFindFunctionsMalformed(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "garbage")
	require.NoError(t, os.WriteFile(garbage, []byte("\x7fELF garbage garbage garbage garbage garbage garbage garbage"), 0o644))
	_, err := findFunctionsIn(t, garbage, func(string) bool { return true })
	require.Error(t, err)
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = findFunctionsIn(t, empty, func(string) bool { return true })
	require.Error(t, err)
}

// A Go binary's functions are found by the names `go tool nm` shows, from
// its symbol table or, stripped (-s -w, as images ship them), from its
// pclntab, at the same place, PIE or not, with a copy of their code; C
// code linked in with cgo is told apart.
func TestFindFunctionsGoStripped(t *testing.T) {
	names := []string{"main.(*Server).handle", "main.Sum[go.shape.int]", "main.main.func1", "main.fib"}
	match := func(name string) bool { return slices.Contains(names, name) }
	for _, pie := range []bool{false, true} {
		var found [2]ELFFunctions
		for i, ldflags := range []string{"", "-s -w"} {
			bin := filepath.Join(t.TempDir(), "gofuncs")
			b := testutil.GoBuild{LDFlags: ldflags, PIE: pie}
			require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "gofuncs"), bin, runtime.GOARCH, b))
			res, err := findFunctionsIn(t, bin, match)
			require.NoError(t, err, "pie %v, ldflags %q", pie, ldflags)
			require.True(t, res.Go)
			require.Len(t, res.Symbols, len(names), "pie %v, ldflags %q", pie, ldflags)
			data, err := os.ReadFile(bin)
			require.NoError(t, err)
			for _, s := range res.Symbols {
				require.True(t, s.Go, s.Name)
				require.Equal(t, data[s.Offset:s.Offset+s.Size], s.Code, s.Name)
			}
			found[i] = res
		}
		// The pclntab's ranges run to the next function: the alignment
		// padding is in them.
		for i, s := range found[1].Symbols {
			want := found[0].Symbols[i]
			require.InDelta(t, want.Size+16, s.Size, 16, "%s: pie %v", s.Name, pie)
			s.Size, s.Code, want.Code = want.Size, nil, nil
			require.Equal(t, want, s, "pie %v: symbol table and pclntab", pie)
		}
	}
}

func TestFindFunctionsCgo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "goscopes")
	require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goscopes"), bin, runtime.GOARCH, testutil.GoBuild{Cgo: true}))
	res, err := findFunctionsIn(t, bin, func(name string) bool {
		return name == "bpfprofiler_c_work" || name == "main.(*server).checkout"
	})
	require.NoError(t, err)
	require.True(t, res.Go)
	require.Len(t, res.Symbols, 2)
	for _, s := range res.Symbols {
		isGo := s.Name != "bpfprofiler_c_work"
		require.Equal(t, isGo, s.Go, s.Name)
		require.Equal(t, isGo, s.Code != nil, s.Name)
	}
}
