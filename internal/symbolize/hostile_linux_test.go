//go:build linux

package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Files a profiled process controls are hostile input to the collector:
// these tests play the process.

const (
	jitMaps = "7f0000000000-7f0000100000 r-xp 00000000 00:00 0 \n"
	jitAddr = 0x7f0000001010
	pid     = 42
)

// observed returns a symbolizer over fs that re-reads files on every miss,
// and its logs.
func observed(fs procfs.FS) (*Symbolizer, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	s := New(Options{Proc: fs, Logger: zap.New(core)})
	s.refreshInterval = 0
	return s, logs
}

// lookupWithin symbolizes one leaf address of pid and fails the test when
// that takes longer than d: the report loop must never block on a file.
func lookupWithin(t *testing.T, s *Symbolizer, pid uint32, addr uint64, d time.Duration) report.Frame {
	t.Helper()
	done := make(chan []report.Frame, 1)
	go func() { done <- s.User(pid, []uint64{addr}) }()
	select {
	case frames := <-done:
		require.Len(t, frames, 1)
		assert.Equal(t, addr, frames[0].Address, "the address is kept")
		return frames[0]
	case <-time.After(d):
		t.Fatalf("symbolizing an address of pid %d blocked for more than %v", pid, d)
		return report.Frame{}
	}
}

// refusals returns the log entries that refuse file.
func refusals(logs *observer.ObservedLogs, file string) []observer.LoggedEntry {
	return logs.Filter(func(e observer.LoggedEntry) bool {
		return e.ContextMap()["file"] == file && e.ContextMap()["reason"] != nil && e.ContextMap()["reason"] != ""
	}).All()
}

// A FIFO as perf map: before, the report loop blocked forever in open.
func TestPerfMapFIFODoesNotBlock(t *testing.T) {
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", nil)
	mapFile := fs.RootPath(pid, "/tmp/perf-42.map")
	require.NoError(t, os.MkdirAll(filepath.Dir(mapFile), 0o777))
	require.NoError(t, unix.Mkfifo(mapFile, 0o666))
	s, logs := observed(fs)
	for range 3 {
		f := lookupWithin(t, s, pid, jitAddr, 2*time.Second)
		assert.Empty(t, f.Function)
	}
	assert.Equal(t, map[string]uint64{procfs.ReasonNotRegular: 1}, s.Stats().FilesRefused)
	entries := refusals(logs, mapFile)
	require.Len(t, entries, 1, "logged once")
	assert.Equal(t, procfs.ReasonNotRegular, entries[0].ContextMap()["reason"])
}

// A perf map linked to a root-only file: none of its lines may become a
// function name.
func TestPerfMapSymlinkToRootOnlyFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(secret, []byte("7f0000001000 100 root_only_secret\n"), 0o600))
	for _, target := range []string{secret, "../" + strings.TrimPrefix(secret, "/")} {
		t.Run(target, func(t *testing.T) {
			fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", nil)
			mapFile := fs.RootPath(pid, "/tmp/perf-42.map")
			require.NoError(t, os.MkdirAll(filepath.Dir(mapFile), 0o777))
			require.NoError(t, os.Symlink(target, mapFile))
			s, logs := observed(fs)
			f := lookupWithin(t, s, pid, jitAddr, 2*time.Second)
			assert.Empty(t, f.Function)
			assert.Equal(t, map[string]uint64{procfs.ReasonSymlink: 1}, s.Stats().FilesRefused)
			require.Len(t, refusals(logs, mapFile), 1)
		})
	}
}

// An absolute link inside the process's root leads to a path inside that
// root, not to the collector's file of that name.
func TestPerfMapAbsoluteLinkStaysInRoot(t *testing.T) {
	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "perf-42.map"), []byte("7f0000001000 100 host_file_fn\n"), 0o644))
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", nil)
	require.NoError(t, os.Symlink(host, fs.RootPath(pid, "/tmp")))
	s, _ := observed(fs)
	assert.Empty(t, lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function, "the host's file must not be read")

	// An absolute link is resolved inside the root: the process's own
	// /var/jit, whatever the host has there.
	require.NoError(t, os.Remove(fs.RootPath(pid, "/tmp")))
	require.NoError(t, os.Symlink("/var/jit", fs.RootPath(pid, "/tmp")))
	require.NoError(t, os.MkdirAll(fs.RootPath(pid, "/var/jit"), 0o755))
	require.NoError(t, os.WriteFile(fs.RootPath(pid, "/var/jit/perf-42.map"), []byte("7f0000001000 100 in_root_fn\n"), 0o644))
	assert.Equal(t, "in_root_fn", lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function)
}

// writePerfMap writes a perf map of at least size bytes of valid lines.
func writePerfMap(t *testing.T, name string, size int64) {
	t.Helper()
	var chunk bytes.Buffer
	for i := 0; chunk.Len() < 1<<20; i++ {
		fmt.Fprintf(&chunk, "%x 10 LazyCompile:*jit_function_%d /app/server.js:%d\n", 0x7f0000001000+uint64(i)*16, i, i)
	}
	f, err := os.Create(name)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	for n := int64(0); n < size; n += int64(chunk.Len()) {
		_, err = w.Write(chunk.Bytes())
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
}

func memStats() runtime.MemStats {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// A 200 MB perf map is refused without being read: the heap allocated while
// symbolizing stays under the 8 MiB cap plus slack. Before, it was parsed
// whole (hundreds of MB).
func TestPerfMapOversizeRefused(t *testing.T) {
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", nil)
	mapFile := fs.RootPath(pid, "/tmp/perf-42.map")
	require.NoError(t, os.MkdirAll(filepath.Dir(mapFile), 0o777))
	writePerfMap(t, mapFile, 200<<20)
	s, logs := observed(fs)

	const limit, slack = DefaultMaxPerfMap, 4 << 20
	before := memStats()
	f := lookupWithin(t, s, pid, jitAddr, 10*time.Second)
	after := memStats()
	assert.Empty(t, f.Function)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MiB, heap held %+.1f MiB", float64(allocated)/(1<<20), (float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20))
	assert.Less(t, allocated, uint64(limit+slack), "bytes allocated while symbolizing")
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(limit+slack), "heap held")
	assert.Equal(t, map[string]uint64{procfs.ReasonTooLarge: 1}, s.Stats().FilesRefused)
	entries := refusals(logs, mapFile)
	require.Len(t, entries, 1)
	assert.Contains(t, entries[0].ContextMap()["error"], "over the limit of")

	// Under a larger cap the same kind of file is read.
	require.NoError(t, os.Truncate(mapFile, 0))
	writePerfMap(t, mapFile, 1<<20)
	s = New(Options{Proc: fs, MaxPerfMapBytes: 4 << 20})
	assert.Equal(t, "LazyCompile:*jit_function_0 /app/server.js:0", s.User(pid, []uint64{0x7f0000001004})[0].Function)
	assert.Empty(t, s.Stats().FilesRefused)
}

// endless serves perf map lines forever, counting the bytes served.
type endless struct{ served int64 }

func (e *endless) Read(p []byte) (int, error) {
	const line = "7f0000001000 10 grows_while_read\n"
	for i := range p {
		p[i] = line[(e.served+int64(i))%int64(len(line))]
	}
	e.served += int64(len(p))
	return len(p), nil
}

// A file that grows while it is read (the size checked first was small)
// is read no further than the cap.
func TestReadPerfMapBounded(t *testing.T) {
	const limit = 1 << 20
	src := &endless{}
	_, _, err := readPerfMap("grows.map", src, 100, limit)
	assert.Equal(t, procfs.ReasonTooLarge, procfs.RefusalReason(err), "%v", err)
	assert.LessOrEqual(t, src.served, int64(limit+64<<10), "bytes read past the cap")
}

// A perf map owned by another user than the process's (a link or bind
// mount to someone else's file) is refused.
func TestPerfMapWrongOwnerRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "chown needs root")
	}
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", map[string][]byte{
		"/tmp/perf-42.map": []byte("7f0000001000 100 other_users_fn\n"),
	})
	require.NoError(t, os.WriteFile(fs.Path(pid, "status"), []byte("Name:\tnode\nUid:\t1000\t1000\t1000\t1000\n"), 0o644))
	mapFile := fs.RootPath(pid, "/tmp/perf-42.map")
	require.NoError(t, os.Chown(mapFile, 12345, 12345))
	s, logs := observed(fs)
	assert.Empty(t, lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function)
	assert.Equal(t, map[string]uint64{procfs.ReasonOwner: 1}, s.Stats().FilesRefused)
	require.Len(t, refusals(logs, mapFile), 1)

	// Owned by the process's uid, or by root, it is read.
	for _, uid := range []int{1000, 0} {
		require.NoError(t, os.Chown(mapFile, uid, uid))
		// A new mtime, so the file is read again.
		require.NoError(t, os.Chtimes(mapFile, time.Now(), time.Now().Add(time.Duration(uid+1)*time.Second)))
		assert.Equal(t, "other_users_fn", lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function, "uid %d", uid)
	}
}

// A read that never returns (FUSE, a dead NFS server) costs the deadline
// once; the file is not read again while that read is stuck.
func TestPerfMapStuckReadBounded(t *testing.T) {
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/node", nil)
	s, logs := observed(fs)
	s.deadline = procfs.NewDeadline(100*time.Millisecond, 4)
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	s.readPerfMap = func(uint32, string, procfs.Status, *perfMap) (*perfMap, error) {
		calls.Add(1)
		<-release
		return nil, os.ErrNotExist
	}
	t0 := time.Now()
	assert.Empty(t, lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function)
	for range 5 {
		assert.Empty(t, lookupWithin(t, s, pid, jitAddr, 2*time.Second).Function)
	}
	assert.Less(t, time.Since(t0), time.Second, "six lookups, one deadline")
	assert.EqualValues(t, 1, calls.Load(), "one read in flight per file")
	assert.Equal(t, map[string]uint64{procfs.ReasonTimeout: 1, procfs.ReasonStuck: 1}, s.Stats().FilesRefused)
	assert.Len(t, refusals(logs, fs.RootPath(pid, "/tmp/perf-42.map")), 2)
}

// dynLibProcess is a fake process mapping a shared library at 0x7f0000000000
// with the given maps line device and inode, and the address of exported_fn.
func dynLibProcess(t *testing.T, lib []byte, libPath string) (procfs.FS, uint64) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(lib))
	require.NoError(t, err)
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var fn uint64
	for _, s := range syms {
		if s.Name == "exported_fn" {
			fn = s.Value
		}
	}
	require.NotZero(t, fn)
	maps := fmt.Sprintf("7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 %s\n", libPath)
	return fakeProcess(t, pid, maps, "/usr/bin/app", map[string][]byte{libPath: lib}), 0x7f0000000000 + fn
}

// setMapsIdentity rewrites the device and inode of the maps of pid.
func setMapsIdentity(t *testing.T, fs procfs.FS, dev string, inode uint64) {
	t.Helper()
	b, err := os.ReadFile(fs.Path(pid, "maps"))
	require.NoError(t, err)
	f := strings.Fields(string(b))
	f[3], f[4] = dev, fmt.Sprint(inode)
	require.NoError(t, os.WriteFile(fs.Path(pid, "maps"), []byte(strings.Join(f, " ")+"\n"), 0o644))
}

// A mapped ELF file is read only when it is the file the maps name by
// device and inode: a process cannot offer another file under that name.
func TestELFReplacedFileRefused(t *testing.T) {
	lib, err := buildDynLib(t, "gnu")
	if err != nil {
		t.Skipf("cannot build a shared library: %v", err)
	}
	fs, addr := dynLibProcess(t, lib, "/lib/libdyn.so")
	s, _ := observed(fs)
	assert.Equal(t, "exported_fn", lookupWithin(t, s, pid, addr, 2*time.Second).Function, "the mapped file")

	var st unix.Stat_t
	require.NoError(t, unix.Stat(fs.RootPath(pid, "/lib/libdyn.so"), &st))
	setMapsIdentity(t, fs, fmt.Sprintf("%x:%x", unix.Major(st.Dev), unix.Minor(st.Dev)), st.Ino+1)
	s, logs := observed(fs)
	assert.Empty(t, lookupWithin(t, s, pid, addr, 2*time.Second).Function)
	assert.Equal(t, map[string]uint64{procfs.ReasonReplaced: 1}, s.Stats().FilesRefused)
	require.Len(t, logs.FilterField(zap.String("reason", procfs.ReasonReplaced)).All(), 1)
}

// An absolute link in the process's root to a host file is not followed,
// even when the maps name the host file's device and inode.
func TestELFAbsoluteLinkNotFollowedOutOfRoot(t *testing.T) {
	lib, err := buildDynLib(t, "gnu")
	if err != nil {
		t.Skipf("cannot build a shared library: %v", err)
	}
	host := t.TempDir()
	hostLib := filepath.Join(host, "libdyn.so")
	require.NoError(t, os.WriteFile(hostLib, lib, 0o644))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(hostLib, &st))

	fs, addr := dynLibProcess(t, lib, "/usr/lib/libdyn.so")
	require.NoError(t, os.RemoveAll(fs.RootPath(pid, "/usr/lib")))
	require.NoError(t, os.Symlink(host, fs.RootPath(pid, "/usr/lib")))
	setMapsIdentity(t, fs, fmt.Sprintf("%x:%x", unix.Major(st.Dev), unix.Minor(st.Dev)), st.Ino)
	s, _ := observed(fs)
	assert.Empty(t, lookupWithin(t, s, pid, addr, 2*time.Second).Function, "the host's library must not be read")
	// The link leads nowhere in the root, and the fake /proc has no
	// map_files link: the mapping reads as gone, which is no file's error.
	assert.Zero(t, s.Stats().FileErrors)
}

// A FIFO under the name of a mapped file does not block.
func TestELFFIFODoesNotBlock(t *testing.T) {
	fs := fakeProcess(t, pid, "7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 /lib/libx.so\n", "/usr/bin/app", nil)
	require.NoError(t, os.MkdirAll(fs.RootPath(pid, "/lib"), 0o755))
	require.NoError(t, unix.Mkfifo(fs.RootPath(pid, "/lib/libx.so"), 0o666))
	s, _ := observed(fs)
	assert.Empty(t, lookupWithin(t, s, pid, 0x7f0000001000, 2*time.Second).Function)
	assert.Equal(t, map[string]uint64{procfs.ReasonNotRegular: 1}, s.Stats().FilesRefused)
}

// Many processes with large perf maps: the maps held together stay within
// the budget (four times the cap, plus the map being added), each lookup
// still resolving through its own process's map.
func TestPerfMapTotalBudget(t *testing.T) {
	const maxMap = 1 << 20
	var fs procfs.FS
	s := New(Options{MaxPerfMapBytes: maxMap})
	s.refreshInterval = 0
	for i := range 8 {
		p := uint32(100 + i)
		if i == 0 {
			fs = fakeProcess(t, p, jitMaps, "/usr/bin/node", nil)
			s.proc = fs
		} else {
			require.NoError(t, os.MkdirAll(fs.Path(p, "root", "tmp"), 0o755))
			require.NoError(t, os.WriteFile(fs.Path(p, "maps"), []byte(jitMaps), 0o644))
			require.NoError(t, os.WriteFile(fs.Path(p, "status"), []byte(statusOf(p)), 0o644))
		}
		mapFile := fs.RootPath(p, fmt.Sprintf("/tmp/perf-%d.map", p))
		require.NoError(t, os.MkdirAll(filepath.Dir(mapFile), 0o755))
		writePerfMap(t, mapFile, 900<<10)
		require.NoError(t, os.Truncate(mapFile, 900<<10))
		assert.Equal(t, "LazyCompile:*jit_function_0 /app/server.js:0", s.User(p, []uint64{0x7f0000001004})[0].Function)
		s.mu.Lock()
		held := s.perfMapBytes
		s.mu.Unlock()
		assert.LessOrEqual(t, held, int64(perfMapBudget*maxMap+2*maxMap), "after %d processes", i+1)
		assert.Greater(t, held, int64(0))
	}
	assert.Empty(t, s.Stats().FilesRefused)
}
