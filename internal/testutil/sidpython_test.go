package testutil

import (
	"os/exec"
	"strconv"
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

// The builds from source run, with their whole standard library (the
// Python tests compress with zlib and run asyncio), the free-threaded ones
// without the GIL.
func TestCPythonBuilds(t *testing.T) {
	for _, c := range []struct {
		name    string
		build   func(testing.TB) Interpreter
		release string
		gil     string
	}{
		{"free-threaded 3.13", func(t testing.TB) Interpreter { return FreeThreadedPython(t, CPython313BuildVersion) }, CPython313BuildVersion, "False"},
		{"free-threaded 3.14", func(t testing.TB) Interpreter { return FreeThreadedPython(t, CPythonBuildVersion) }, CPythonBuildVersion, "False"},
		{"a PyThreadState field added", MovedFieldPython, CPythonBuildVersion, "True"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.build(t)
			out, err := RunWithin(exec.Command(in.Path, "-c",
				"import sys, zlib, threading, asyncio; print('%d.%d.%d' % sys.version_info[:3], sys._is_gil_enabled())"), BuildTimeout)
			require.NoError(t, err, "%s", out)
			require.Equal(t, c.release+" "+c.gil, strings.TrimSpace(string(out)))
			minor, _ := strconv.Atoi(c.release[len("3."):len("3.14")])
			require.Equal(t, minor, in.Minor())
		})
	}
}
