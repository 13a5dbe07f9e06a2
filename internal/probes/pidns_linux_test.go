//go:build linux

package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// With Options.PIDNamespace set to a child pid namespace, records carry the
// ids seen from it: here the workload runs as pid 1 of a new namespace and
// writes its own (namespace) tids.
func TestScopesChildPIDNamespace(t *testing.T) {
	testutil.RequireBPF(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare not found")
	}
	bin := testutil.BuildC(t, "scopes.c")
	out := filepath.Join(t.TempDir(), "measured.txt")
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "chrt"}, realtime(bin, out, "stdin")...)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	testutil.StartChild(t, cmd)

	// The workload is unshare's child (host pid), once it has exec'ed bin.
	var child uint32
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
		if err != nil {
			return false
		}
		for _, f := range strings.Fields(string(b)) {
			if exe, _ := os.Readlink(filepath.Join("/proc", f, "exe")); exe == bin {
				pid, _ := strconv.ParseUint(f, 10, 32)
				child = uint32(pid)
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
	ns, err := procfs.FS{Root: "/proc"}.PIDNamespace(child)
	require.NoError(t, err)
	require.False(t, ns.IsZero(), "unshare --pid made no new pid namespace")

	m, c := openAndRunWith(t, scopeSpecs(bin), Options{PIDNamespace: ns})
	require.Equal(t, 8, m.Stats().Links)
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	checkScopes(t, c, out, 1) // pid 1 in its namespace; tids as it wrote them
}
