package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
