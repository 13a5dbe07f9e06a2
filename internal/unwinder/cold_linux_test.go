//go:build linux

package unwinder

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// When a new table does not fit and no table is idle, the tables no walk
// used for coldTableAge make room, the walks' marks keeping the others:
// the processes mapping an evicted table's file see it evicted (their walks
// there end and ask a rescan), and their rescan loads it again.
func TestLoaderColdTables(t *testing.T) {
	proc := procfs.FS{Root: "/proc"}
	a := uint32(testutil.StartWorkload(t, testutil.BuildC(t, "nofp.c"), "60").Process.Pid)
	py := testutil.StartChild(t, exec.Command("/usr/bin/python3.11", "-c", "import time; time.sleep(60)"))
	b := uint32(py.Pid())
	waitMapped(t, a, "/libc")
	waitMapped(t, b, "/libc")
	// rows loads pid alone: the rows of its tables, and of its smallest
	// (the nofp program's, for a).
	rows := func(pid uint32) (all, smallest uint64) {
		probe := NewLoader(newTestMaps(t, maxTables), proc, 1<<22)
		require.NoError(t, probe.Load(pid))
		smallest = 1 << 22
		for _, tb := range probe.files {
			if tb.rows > 0 {
				smallest = min(smallest, uint64(tb.rows))
			}
		}
		return probe.Stats().RowsUsed, smallest
	}
	rowsA, progRows := rows(a)
	rowsB, _ := rows(b)

	// Room for b's tables and all of a's but its program's.
	l := NewLoader(newTestMaps(t, maxTables), proc, rowsB+progRows-1)
	require.NoError(t, l.Load(a))
	require.Equal(t, rowsA, l.Stats().RowsUsed)

	// A walk used the table of a's program: the sweep stamps it.
	l.mu.Lock()
	var prog, other *fileTable
	for _, tb := range l.files {
		if tb.rows == 0 {
			continue
		}
		if prog == nil || tb.rows < prog.rows { // the smallest: the program's
			other, prog = prog, tb
		} else {
			other = tb
		}
	}
	require.NotNil(t, other)
	require.NoError(t, l.maps.Used.Put(prog.slot, uint32(1)))
	built, otherBuilt := prog.usedAt, other.usedAt
	l.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	l.Sweep()
	l.mu.Lock()
	assert.True(t, prog.usedAt.After(built), "the used table is stamped at the sweep")
	assert.Equal(t, otherBuilt, other.usedAt, "an unused table keeps its stamp")
	var used uint32
	require.NoError(t, l.maps.Used.Lookup(prog.slot, &used))
	assert.Zero(t, used, "marks cleared")
	// Unused for long, the program's table is the one cold table.
	for _, tb := range l.files {
		tb.usedAt = time.Now()
	}
	prog.usedAt = time.Now().Add(-2 * coldTableAge)
	l.mu.Unlock()

	require.NoError(t, l.Load(b))
	st := l.Stats()
	assert.Zero(t, st.Failed[capture.TableSpaceFull], "cold tables made room")
	assert.Equal(t, uint64(1), st.ColdEvicted)

	l.mu.Lock()
	lpA := l.procs[a]
	evicted := 0
	for i := range lpA.keys {
		var v bpf.CpuUnwindMapping
		require.NoError(t, l.maps.Mappings.Lookup(&lpA.keys[i], &v))
		if v.Table == evictedTable && v.Rows == 0 {
			evicted++
		}
	}
	assert.True(t, lpA.evicted)
	l.mu.Unlock()
	assert.Positive(t, evicted, "a's mappings of the evicted files say so")

	// a's next walk there asks a rescan: it reloads, its mappings unchanged.
	reloads := l.Stats().Reloads
	assert.True(t, l.evicted(a), "held-back rescans are not held back then")
	changed, err := l.Rescan(a)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, reloads+1, l.Stats().Reloads)
	l.mu.Lock()
	assert.False(t, l.procs[a].evicted)
	l.mu.Unlock()
}

// waitMapped waits until pid maps an executable file whose path holds part.
func waitMapped(t *testing.T, pid uint32, part string) {
	t.Helper()
	require.Eventually(t, func() bool {
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		for _, line := range strings.Split(string(maps), "\n") {
			if strings.Contains(line, " r-xp ") && strings.Contains(line, part) {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
}
