//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memoryCgroup is a memory cgroup of its own with a limit, as a DaemonSet's
// container has: cgroup v1's memory controller where the machine mounts it
// (hybrid hierarchies), else cgroup v2's. Both charge BPF maps to the cgroup
// of the process that created them (kernel 5.11 and later).
type memoryCgroup struct {
	dir string
	v1  bool
}

func newMemoryCgroup(t *testing.T, limit uint64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("bpfprofiler-fault-%d", time.Now().UnixNano())
	cg := &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name), v1: true}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", name)}
		require.NoError(t, os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0o644),
			"enable the memory controller for cgroup v2's children")
	}
	require.NoError(t, os.Mkdir(cg.dir, 0o755))
	t.Cleanup(func() {
		// Empty once the collector exited; its maps are freed a little later.
		deadline := time.Now().Add(10 * time.Second)
		for os.Remove(cg.dir) != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	})
	file := "memory.max"
	if cg.v1 {
		file = "memory.limit_in_bytes"
	}
	require.NoError(t, os.WriteFile(filepath.Join(cg.dir, file), []byte(strconv.FormatUint(limit, 10)), 0o644))
	return cg
}

// wrap returns argv run inside the cgroup: a shell moves itself in, then
// execs it.
func (cg *memoryCgroup) wrap(argv ...string) []string {
	return append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg.dir}, argv...)
}

func (cg *memoryCgroup) read(v1, v2 string) uint64 {
	name := v2
	if cg.v1 {
		name = v1
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, name))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// peak is the most memory charged to the cgroup so far.
func (cg *memoryCgroup) peak() uint64 { return cg.read("memory.max_usage_in_bytes", "memory.peak") }

// ooms counts the processes of the cgroup the kernel killed for memory.
func (cg *memoryCgroup) ooms() uint64 {
	name := "memory.events"
	if cg.v1 {
		name = "memory.oom_control"
	}
	b, _ := os.ReadFile(filepath.Join(cg.dir, name))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}
