//go:build linux

package unwinder

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Two processes loaded one after the other have their tables queued each
// one's first file before either's second (a process announced later does
// not wait for every file of the ones before it), and the tables come
// once built: a mapping walked with frame pointers until then.
func TestLoaderQueuesEachProcessFirstFilesFirst(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	var pids []uint32
	for _, src := range []string{"nofp.c", "cpuburn.c"} {
		cmd := testutil.StartWorkload(t, testutil.BuildC(t, src), "60")
		pid := uint32(cmd.Process.Pid)
		require.Eventually(t, func() bool { // the dynamic loader has mapped libc
			b, _ := os.ReadFile(procfs.FS{Root: "/proc"}.Path(pid, "maps"))
			return strings.Contains(string(b), libc)
		}, 5*time.Second, 10*time.Millisecond)
		pids = append(pids, pid)
	}
	loaded := time.Now()
	for _, pid := range pids {
		require.NoError(t, l.LoadSoon(pid))
	}
	assert.Empty(t, l.takeReadyWaits(), "both wait for their tables")
	l.mu.Lock()
	var ranks []int
	for _, pb := range l.buildQueue[smallFiles] {
		ranks = append(ranks, pb.rank)
	}
	l.mu.Unlock()
	// Each executable (rank 0); then the first's libc and its dynamic
	// loader, which the second shares.
	require.GreaterOrEqual(t, len(ranks), 3, "ranks %v", ranks)
	assert.Equal(t, []int{0, 0}, ranks[:2], "the two executables first: ranks %v", ranks)
	assert.IsNonDecreasing(t, ranks)

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
