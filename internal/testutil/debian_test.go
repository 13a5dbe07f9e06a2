package testutil

import (
	"debug/elf"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDebianPackage(t *testing.T) {
	root := DebianPackage(t, "arm64", "xz-utils")
	f, err := elf.Open(filepath.Join(root, "usr/bin/xz"))
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, elf.EM_AARCH64, f.Machine)
	require.Equal(t, root, DebianPackage(t, "arm64", "xz-utils"), "the second call finds it unpacked")
}
