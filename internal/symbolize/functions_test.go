package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindFunctionsGoBinary(t *testing.T) {
	f, err := os.Open(buildGo(t))
	require.NoError(t, err)
	defer f.Close()

	res, err := FindFunctions(f, func(name string) bool { return name == "main.crunch" || name == "no.such" })
	require.NoError(t, err)
	require.True(t, res.Go)
	require.Len(t, res.Symbols, 1)
	s := res.Symbols[0]
	require.Equal(t, "main.crunch", s.Name)

	// The file offset holds the function's first bytes.
	ef, err := elf.NewFile(f)
	require.NoError(t, err)
	text := ef.Section(".text")
	require.NotNil(t, text)
	require.GreaterOrEqual(t, s.Value, text.Addr)
	require.Equal(t, s.Value-text.Addr+text.Offset, s.Offset)
}

func TestFindFunctionsCAliases(t *testing.T) {
	bin := buildC(t, "cc", "aliases.c", "-O1")
	f, err := os.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	res, err := FindFunctions(f, func(name string) bool { return strings.HasPrefix(name, "probe_target") })
	require.NoError(t, err)
	require.False(t, res.Go)
	require.Len(t, res.Symbols, 2)
	require.Equal(t, res.Symbols[0].Offset, res.Symbols[1].Offset, "an alias shares its target's offset")
	require.Equal(t, []string{"probe_target", "probe_target_alias"}, []string{res.Symbols[0].Name, res.Symbols[1].Name})
}

func TestFindFunctionsMalformed(t *testing.T) {
	_, err := FindFunctions(bytes.NewReader([]byte("\x7fELF garbage")), func(string) bool { return true })
	require.Error(t, err)
}
