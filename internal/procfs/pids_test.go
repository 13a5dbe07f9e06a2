package procfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPIDs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"1", "42", "self", "sys", "0"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "7"), nil, 0o644)) // a file, not a process
	pids, err := FS{Root: root}.PIDs()
	require.NoError(t, err)
	require.ElementsMatch(t, []uint32{1, 42}, pids)

	_, err = FS{Root: filepath.Join(root, "missing")}.PIDs()
	require.Error(t, err)
}
