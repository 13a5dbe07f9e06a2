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
			out, err := RunWithin(exec.Command(in.Path, "-c", "import sys, zlib, threading; print('%d.%d' % sys.version_info[:2])"), BuildTimeout)
			require.NoError(t, err, "%s", out)
			require.Equal(t, v, strings.TrimSpace(string(out)))
		})
	}
}
