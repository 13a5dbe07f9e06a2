//go:build linux

package unwinder

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Two processes loaded one after the other have their tables queued the
// cheapest first (a process announced later does not wait for every file
// of the ones before it; small tables do not wait for larger ones), and
// the tables come once built: a mapping walked with frame pointers until
// then.
func TestLoaderQueuesTheCheapestTablesFirst(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	var pids []uint32
	var exes []string
	for _, src := range []string{"nofp.c", "cpuburn.c"} {
		exe := testutil.BuildC(t, src)
		cmd := testutil.StartWorkload(t, exe, "60")
		pid := uint32(cmd.Process.Pid)
		require.Eventually(t, func() bool { // the dynamic loader has mapped libc
			b, _ := os.ReadFile(procfs.FS{Root: "/proc"}.Path(pid, "maps"))
			return strings.Contains(string(b), libc)
		}, 5*time.Second, 10*time.Millisecond)
		pids = append(pids, pid)
		exes = append(exes, exe)
	}
	loaded := time.Now()
	for _, pid := range pids {
		require.NoError(t, l.LoadSoon(pid))
	}
	assert.Empty(t, l.takeReadyWaits(), "both wait for their tables")
	l.mu.Lock()
	var costs []uint64
	var paths []string
	for _, pb := range l.buildQueue[smallFiles] {
		costs = append(costs, pb.cost)
		paths = append(paths, pb.path)
	}
	l.mu.Unlock()
	// Each executable (a few KB of CFI, the first file of its process);
	// then libc (150 KB, its second), which the second shares.
	require.GreaterOrEqual(t, len(paths), 3, "queued %v", paths)
	assert.ElementsMatch(t, exes, paths[:2], "the two executables first: %v", paths)
	assert.Contains(t, paths[2:], libc)
	assert.IsNonDecreasing(t, costs, "%v", paths)

	for _, pid := range pids {
		m, _, ok := lookup(t, maps, pid, exeStart(t, pid))
		require.True(t, ok)
		assert.Zero(t, m.Rows, "pid %d's executable before its table is built", pid)
	}
	l.RunBuilds()
	built := time.Since(loaded)
	for _, pid := range pids {
		m, _, ok := lookup(t, maps, pid, exeStart(t, pid))
		require.True(t, ok)
		assert.NotZero(t, m.Rows, "pid %d's executable once built", pid)
	}
	// Each waited from its load to its last table's build, counted once:
	// loaded again it waits no more.
	waits := l.takeReadyWaits()
	require.Len(t, waits, 2)
	for _, w := range waits {
		assert.Greater(t, w, time.Duration(0))
		assert.LessOrEqual(t, w, built)
	}
	require.NoError(t, l.LoadSoon(pids[0]))
	assert.Empty(t, l.takeReadyWaits(), "a reload is not counted again")
	// A process whose files were all built waits 0 (its first load
	// finds every table).
	third := testutil.StartWorkload(t, testutil.BuildC(t, "cpuburn.c"), "60")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(procfs.FS{Root: "/proc"}.Path(uint32(third.Process.Pid), "maps"))
		return strings.Contains(string(b), libc)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, l.LoadSoon(uint32(third.Process.Pid)))
	waits = l.takeReadyWaits()
	require.Len(t, waits, 1)
	assert.Less(t, waits[0], built, "no build to wait for")
	pids = append(pids, uint32(third.Process.Pid))
	for _, pid := range pids {
		l.Forget(pid)
	}
	expireIdle(t, l)
}

// exeStart is the start of pid's first executable mapping of its
// executable.
func exeStart(t *testing.T, pid uint32) uint64 {
	t.Helper()
	fs := procfs.FS{Root: "/proc"}
	exe, err := os.Readlink(fs.Path(pid, "exe"))
	require.NoError(t, err)
	all, err := fs.Maps(pid)
	require.NoError(t, err)
	for _, m := range all {
		if m.Executable() && m.Path == exe {
			return m.Start
		}
	}
	t.Fatalf("%s is not mapped executable by %d", exe, pid)
	return 0
}

// Past maxReadyWaits noted between two takes, a sample of them is kept.
func TestReadyWaitsBounded(t *testing.T) {
	var r readyWaits
	for i := range 3 * maxReadyWaits {
		r.note(time.Duration(i))
	}
	assert.Len(t, r.waits, maxReadyWaits)
	assert.Equal(t, 3*maxReadyWaits, r.seen)
	late := 0
	for _, w := range r.waits {
		if w >= maxReadyWaits {
			late++
		}
	}
	// Two thirds of the waits came after the first maxReadyWaits: so do
	// about two thirds of the sample (far from 0, and from all).
	assert.InDelta(t, 2*maxReadyWaits/3, late, maxReadyWaits/10)
}

// A process that exits before its files are opened says nothing of them:
// the next process mapping the same file gets its table (a short-lived
// process must not leave libc or its executable to frame pointers in
// every other process while they are mapped).
func TestLoaderGoneMappingIsNoFileFailure(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	exe := testutil.BuildC(t, "cpuburn.c")
	gone := testutil.StartWorkloadChild(t, exe, "60")
	var m procfs.Map
	ms, err := procfs.FS{Root: "/proc"}.Maps(uint32(gone.Pid()))
	require.NoError(t, err)
	for _, mm := range ms {
		if mm.Executable() && mm.Path == exe {
			m = mm
		}
	}
	require.NotZero(t, m.Inode, "the executable's mapping")
	require.NoError(t, gone.Kill(testutil.Patient(10*time.Second)))

	rank := 0
	l.mu.Lock()
	tb, key := l.table(uint32(gone.Pid()), m, &rank)
	_, kept := l.files[fileKey{m.DevMajor, m.DevMinor, m.Inode}]
	l.mu.Unlock()
	assert.Zero(t, tb.rows)
	assert.Equal(t, fileKey{}, key, "a table of that process's own")
	assert.False(t, kept, "nothing kept of the file")
	assert.Zero(t, l.Stats().Failed[capture.TableOpenFailed], "no file failed")

	alive := testutil.StartWorkload(t, exe, "60")
	pid := uint32(alive.Process.Pid)
	require.NoError(t, l.Load(pid))
	got, _, ok := lookup(t, maps, pid, exeStart(t, pid))
	require.True(t, ok)
	assert.NotZero(t, got.Rows, "the next process's executable has its table")
}
