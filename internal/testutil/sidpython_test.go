package testutil

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Debian sid's CPythons run on this machine with sid's glibc, and report
// their minor version.
func TestSidPython(t *testing.T) {
	for _, v := range SidPythonVersions {
		t.Run(v, func(t *testing.T) {
			in := SidPython(t, v)
			out, err := RunWithin(exec.Command(in.Path, "-c", "import sys, zlib, threading, asyncio; print('%d.%d' % sys.version_info[:2])"), BuildTimeout)
			require.NoError(t, err, "%s", out)
			require.Equal(t, v, strings.TrimSpace(string(out)))
		})
	}
}

// The free-threaded build runs without the GIL, zlib included (the Python
// tests compress with it).
func TestFreeThreadedPython(t *testing.T) {
	in := FreeThreadedPython(t)
	out, err := RunWithin(exec.Command(in.Path, "-c",
		"import sys, zlib, threading, asyncio; print('%d.%d.%d' % sys.version_info[:3], sys._is_gil_enabled())"), BuildTimeout)
	require.NoError(t, err, "%s", out)
	require.Equal(t, CPythonBuildVersion+" False", strings.TrimSpace(string(out)))
	require.Equal(t, 14, in.Minor())
}

// The build with a field added to PyThreadState runs.
func TestMovedFieldPython(t *testing.T) {
	in := MovedFieldPython(t)
	out, err := RunWithin(exec.Command(in.Path, "-c",
		"import sys, zlib, threading, asyncio; print('%d.%d.%d' % sys.version_info[:3], sys._is_gil_enabled())"), BuildTimeout)
	require.NoError(t, err, "%s", out)
	require.Equal(t, CPythonBuildVersion+" True", strings.TrimSpace(string(out)))
}
