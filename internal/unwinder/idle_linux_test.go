//go:build linux

package unwinder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A program run again finds its table idle and reuses it; the same path
// rewritten in place (same device and inode, another file) gets a table
// built anew; an idle table's rows go to a new table that needs them.
func TestLoaderIdleTables(t *testing.T) {
	l := NewLoader(newTestMaps(t, maxTables), procfs.FS{Root: "/proc"}, 1<<20)
	bin := filepath.Join(t.TempDir(), "prog")
	copyExecutable(t, testutil.BuildC(t, "nofp.c"), bin)
	run := func() {
		t.Helper()
		c := testutil.StartWorkloadChild(t, bin, "60")
		pid := uint32(c.Pid())
		// Loaded once the dynamic loader has mapped libc: before, a run
		// would find fewer files than the next.
		require.Eventually(t, func() bool {
			maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
			for _, line := range strings.Split(string(maps), "\n") {
				if strings.Contains(line, " r-xp ") && strings.Contains(line, "/libc") {
					return true
				}
			}
			return false
		}, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, l.Load(pid))
		require.Greater(t, l.Stats().Tables, uint64(1))
		require.NoError(t, c.Kill(testutil.Patient(30*time.Second)))
		l.Forget(pid)
	}
	run()
	first := l.Stats()
	require.Equal(t, first.Tables, first.IdleTables)
	run()
	again := l.Stats()
	assert.Positive(t, again.IdleReused, "the second run reuses the tables of the first")
	assert.Equal(t, first.Tables, again.Tables, "no table built twice")

	// In place: the inode stays, its change time does not.
	copyExecutable(t, testutil.BuildC(t, "cpuburn.c"), bin)
	run()
	rewritten := l.Stats()
	assert.Equal(t, again.IdleReused+again.IdleTables-1, rewritten.IdleReused, "every table reused but the rewritten file's: %+v", rewritten)

	// Rows for a new table come from idle tables when the budget is used
	// up: the oldest first, once idle for releaseDelay.
	l.mu.Lock()
	defer l.mu.Unlock()
	idle := l.idleTables()
	require.NotEmpty(t, idle)
	for _, tb := range idle {
		tb.idleSince = time.Now().Add(-2 * releaseDelay)
	}
	free := uint32(l.stats.RowCapacity - l.budget.used)
	_, ok := l.budget.alloc(free)
	require.True(t, ok, "every row taken")
	need := idle[0].rows
	slot, ok := l.allocEvicting(need)
	require.True(t, ok, "%d rows from idle tables", need)
	assert.Equal(t, uint64(1), l.stats.IdleEvicted)
	l.budget.releaseRows(need)
	l.budget.releaseSlot(slot)
	_, ok = l.allocEvicting(uint32(l.stats.RowCapacity))
	assert.False(t, ok, "more rows than idle tables hold")
	assert.Empty(t, l.idleTables(), "every idle table was given up trying")
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}
