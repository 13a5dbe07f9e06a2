package symbolize

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// copyTestBinary copies the test binary (a Go binary) into dir.
func copyTestBinary(t *testing.T, dir, name string) string {
	t.Helper()
	src, err := testBinary()
	require.NoError(t, err)
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	dst := filepath.Join(dir, name)
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	return dst
}

// realFileProcess writes a fake /proc/<pid> whose root is "/" and whose maps
// map bin, and returns addresses spread over its code.
func realFileProcess(t *testing.T, fs procfs.FS, pid uint32, bin string) []uint64 {
	t.Helper()
	maps, addrs, ok := fixtureMaps(bin)
	require.True(t, ok)
	dir := fs.Path(pid)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.Symlink("/", filepath.Join(dir, "root")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644))
	return addrs
}

// selfMaps reports whether the running process maps path.
func selfMaps(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Contains(string(b), path)
}

func TestMappedFilesReleased(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	dir := t.TempDir()
	a, b := copyTestBinary(t, dir, "a.bin"), copyTestBinary(t, dir, "b.bin")
	fs := procfs.FS{Root: t.TempDir()}
	addrsA, addrsB := realFileProcess(t, fs, 1, a), realFileProcess(t, fs, 2, b)

	s := New(Options{Proc: fs, MaxFiles: 1})
	frames := s.User(1, addrsA[100:108])
	require.NotEmpty(t, frames)
	assert.NotEmpty(t, frames[0].Function)
	assert.True(t, selfMaps(t, a), "a is mapped while cached")

	s.User(2, addrsB[100:108]) // evicts a
	assert.False(t, selfMaps(t, a), "an evicted file is unmapped")
	assert.True(t, selfMaps(t, b))

	require.NoError(t, s.Close())
	assert.False(t, selfMaps(t, b), "Close unmaps every file")
}

func TestMappedFileBudget(t *testing.T) {
	dir := t.TempDir()
	fs := procfs.FS{Root: t.TempDir()}
	var addrs [][]uint64
	for i := range 3 {
		bin := copyTestBinary(t, dir, string(rune('a'+i))+".bin")
		addrs = append(addrs, realFileProcess(t, fs, uint32(i+1), bin))
	}
	s := New(Options{Proc: fs, MaxFileBytes: 1})
	defer s.Close()
	for i, a := range addrs {
		s.User(uint32(i+1), a[:4])
		assert.Equal(t, 1, s.files.len(), "over budget, only the newest file stays")
	}
}

// A file truncated while mapped raises SIGBUS on access: the frames are left
// unresolved and the process survives.
func TestMappedFileTruncated(t *testing.T) {
	bin := copyTestBinary(t, t.TempDir(), "trunc.bin")
	fs := procfs.FS{Root: t.TempDir()}
	addrs := realFileProcess(t, fs, 1, bin)
	s := New(Options{Proc: fs})
	defer s.Close()
	frames := s.User(1, addrs[100:101])
	require.NotEmpty(t, frames[0].Function)

	require.NoError(t, os.Truncate(bin, 4096))
	frames = s.User(1, addrs[len(addrs)/2:len(addrs)/2+4])
	require.Len(t, frames, 4)
	for _, f := range frames {
		assert.Empty(t, f.Function)
	}
	assert.NotZero(t, s.Stats().FileErrors)
}

func TestFrameCache(t *testing.T) {
	bin := copyTestBinary(t, t.TempDir(), "cache.bin")
	fs := procfs.FS{Root: t.TempDir()}
	addrs := realFileProcess(t, fs, 1, bin)
	s := New(Options{Proc: fs})
	defer s.Close()

	stack := []uint64{addrs[10], addrs[20], addrs[30]}
	first := s.User(1, stack)
	refreshes := s.Stats().MapRefreshes
	assert.Equal(t, 3, s.cachedFrames)
	again := s.User(1, stack)
	assert.Equal(t, first, again)
	assert.Equal(t, refreshes, s.Stats().MapRefreshes, "maps are not re-read on hits")
	assert.EqualValues(t, 6, s.Stats().FramesResolved)

	// The cached Address is the sampled one.
	leaf := s.User(1, []uint64{addrs[20]})
	require.NotEmpty(t, leaf)
	assert.Equal(t, addrs[20], leaf[0].Address)

	s.ForgetProcess(1)
	assert.Zero(t, s.cachedFrames)

	// Bounds: reaching the total drops every cache.
	s.maxCachedFrames = 4
	s.User(1, addrs[:4])
	assert.Equal(t, 4, s.cachedFrames)
	s.User(1, addrs[4:5])
	assert.Equal(t, 1, s.cachedFrames)
}

// When a process's maps change (a runtime maps JIT code), the cached frames
// of the mappings that did not change stay; those of a changed one go.
func TestFrameCacheKeptOverNewMappings(t *testing.T) {
	bin := copyTestBinary(t, t.TempDir(), "cache.bin")
	fs := procfs.FS{Root: t.TempDir()}
	addrs := realFileProcess(t, fs, 1, bin)
	mapsPath := filepath.Join(fs.Path(1), "maps")
	orig, err := os.ReadFile(mapsPath)
	require.NoError(t, err)
	s := New(Options{Proc: fs})
	defer s.Close()
	s.User(1, addrs[10:13])
	require.Equal(t, 3, s.cachedFrames)

	jit := "7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n"
	require.NoError(t, os.WriteFile(mapsPath, append(orig, jit...), 0o644))
	s.Prefetch(1)
	assert.Equal(t, 3, s.cachedFrames, "a new JIT mapping keeps the file's frames")
	refreshes := s.Stats().MapRefreshes
	s.User(1, addrs[10:13])
	assert.Equal(t, refreshes, s.Stats().MapRefreshes, "hits")

	replaced := strings.ReplaceAll(string(orig), " r-xp ", " r-xs ")
	require.NoError(t, os.WriteFile(mapsPath, []byte(replaced), 0o644))
	s.Prefetch(1)
	assert.Zero(t, s.cachedFrames, "the file's mapping changed")
}

// The periodic release drops the pages of the files lookups read since the
// last one only: a file whose names all come from the frame cache, or whose
// process is idle, costs no madvise.
func TestPagesReleasedOfFilesRead(t *testing.T) {
	dir := t.TempDir()
	fs := procfs.FS{Root: t.TempDir()}
	addrs := [][]uint64{
		realFileProcess(t, fs, 1, copyTestBinary(t, dir, "a.bin")),
		realFileProcess(t, fs, 2, copyTestBinary(t, dir, "b.bin")),
	}
	s := New(Options{Proc: fs})
	defer s.Close()
	released := map[string]int{}
	release := func() []string {
		s.pagesReleased = time.Time{}
		s.maybeReleasePages()
		var names []string
		s.files.each(func(k fileKey, e *fileEntry) {
			if released[k.path] > 0 {
				names = append(names, filepath.Base(k.path))
			}
		})
		clear(released)
		slices.Sort(names)
		return names
	}
	for pid, a := range addrs {
		s.User(uint32(pid+1), a[10:14])
	}
	s.files.each(func(k fileKey, e *fileEntry) {
		require.NotNil(t, e.ef)
		e.ef.mapped.release = func([]byte) { released[k.path]++ }
	})
	assert.Equal(t, []string{"a.bin", "b.bin"}, release(), "both read")
	s.User(1, addrs[0][20:24])
	assert.Equal(t, []string{"a.bin"}, release(), "only a read since")
	s.User(1, addrs[0][20:24])
	assert.Empty(t, release(), "its names all cached")
}

// Processes of one binary share what was resolved in it: a second process
// (a restarted tool) gets the same frames without reading the file's pages.
func TestFileFramesSharedByProcesses(t *testing.T) {
	dir := t.TempDir()
	fs := procfs.FS{Root: t.TempDir()}
	bin := copyTestBinary(t, dir, "a.bin")
	addrs := realFileProcess(t, fs, 1, bin)
	require.Equal(t, addrs, realFileProcess(t, fs, 2, bin))
	s := New(Options{Proc: fs})
	defer s.Close()

	first := s.User(1, addrs[30:40])
	var ef *elfFile
	s.files.each(func(_ fileKey, e *fileEntry) { ef = e.ef })
	require.NotNil(t, ef)
	assert.True(t, ef.touched, "the first process read the file")
	assert.Len(t, ef.resolved, 10)
	ef.releasePages()

	second := s.User(2, addrs[30:40])
	assert.False(t, ef.touched, "the second process's frames came from the file's cache")
	require.Len(t, second, len(first))
	for i := range first {
		assert.Equal(t, first[i].Function, second[i].Function, "frame %d", i)
		assert.Equal(t, first[i].Line, second[i].Line, "frame %d", i)
	}
	assert.NotEmpty(t, first[0].Function)
}

// Between the periodic releases, every releaseAfterLookups lookups of
// uncached addresses release the pages they read: a first report that reads
// hundreds of names holds a few MiB of the files, not all it touched.
func TestPagesReleasedEveryFewLookups(t *testing.T) {
	fs := procfs.FS{Root: t.TempDir()}
	addrs := realFileProcess(t, fs, 1, copyTestBinary(t, t.TempDir(), "a.bin"))
	require.Greater(t, len(addrs), releaseAfterLookups+1)
	s := New(Options{Proc: fs})
	defer s.Close()
	s.pagesReleased = s.now() // no periodic release during the test

	s.User(1, addrs[:1])
	var ef *elfFile
	s.files.each(func(_ fileKey, e *fileEntry) { ef = e.ef })
	require.NotNil(t, ef)
	ef.symbol(addrs[0]) // the table built now: building it releases the pages too
	released := 0
	ef.mapped.release = func([]byte) { released++ }
	s.lookups = 0

	s.User(1, addrs[1:releaseAfterLookups])
	assert.Equal(t, 0, released, "%d lookups", releaseAfterLookups-1)
	assert.True(t, ef.touched)
	s.User(1, addrs[releaseAfterLookups:releaseAfterLookups+1])
	assert.Equal(t, 1, released, "%d lookups", releaseAfterLookups)
	assert.False(t, ef.touched)
	s.User(1, addrs[1:releaseAfterLookups])
	s.User(1, addrs[releaseAfterLookups:releaseAfterLookups+1])
	assert.Equal(t, 1, released, "cached frames read no pages")
	assert.Equal(t, 0, s.lookups)
}

// twoFileProcesses returns a symbolizer of processes 1 and 2, each mapping
// its own copy of the test binary (a.bin, b.bin; addresses of their
// symbols returned), whose clock is *now.
func twoFileProcesses(t *testing.T) (s *Symbolizer, a, b []uint64, now *time.Time) {
	dir := t.TempDir()
	fs := procfs.FS{Root: t.TempDir()}
	a = realFileProcess(t, fs, 1, copyTestBinary(t, dir, "a.bin"))
	b = realFileProcess(t, fs, 2, copyTestBinary(t, dir, "b.bin"))
	s = New(Options{Proc: fs})
	t.Cleanup(func() { _ = s.Close() })
	clock := time.Now()
	s.now = func() time.Time { return clock }
	return s, a, b, &clock
}

// A file no lookup used for fileIdleTTL is closed at the next sweep (on a
// node of ever new binaries the cache holds those in use); one in use
// stays.
func TestIdleFilesExpire(t *testing.T) {
	s, a, b, now := twoFileProcesses(t)
	cached := func() []string {
		var names []string
		s.files.each(func(k fileKey, _ *fileEntry) { names = append(names, filepath.Base(k.path)) })
		slices.Sort(names)
		return names
	}
	s.User(1, a[10:12])
	s.User(2, b[10:12])
	require.Equal(t, []string{"a.bin", "b.bin"}, cached())
	for _, step := range []struct {
		after time.Duration
		use   []uint64 // looked up in a.bin (not cached frames) before the sweep
		want  []string
	}{
		{time.Minute, a[12:14], []string{"a.bin", "b.bin"}},
		{fileIdleTTL - time.Minute - 10*time.Second, a[14:16], []string{"a.bin", "b.bin"}}, // b idle 10 s short of it
		{20 * time.Second, a[16:18], []string{"a.bin"}},
		{fileIdleTTL + time.Second, nil, nil},
	} {
		*now = now.Add(step.after)
		s.pagesReleased = time.Time{}
		if step.use != nil {
			s.User(1, step.use)
		} else {
			s.maybeReleasePages()
		}
		assert.Equal(t, step.want, cached(), "after %v more", step.after)
	}
}

// The cache gauges follow what is cached: two processes' files and frames
// once their addresses are looked up, none once the files expire and the
// processes are forgotten.
func TestCacheSizes(t *testing.T) {
	s, a, b, now := twoFileProcesses(t)
	assert.Equal(t, CacheSizes{}, s.CacheSizes())
	s.User(1, a[10:13])
	s.User(2, b[10:12])
	got := s.CacheSizes()
	assert.Equal(t, 2, got.Files)
	assert.Equal(t, s.files.weight, got.FileBytes)
	assert.Positive(t, got.FileBytes)
	assert.Equal(t, 2, got.Processes)
	assert.Equal(t, 5, got.Frames)
	assert.Zero(t, got.PerfMapBytes)

	s.ForgetProcess(1)
	s.ForgetProcess(2)
	*now = now.Add(fileIdleTTL + time.Second)
	s.pagesReleased = time.Time{}
	s.maybeReleasePages()
	assert.Equal(t, CacheSizes{}, s.CacheSizes())
}

func TestLRUExpireBefore(t *testing.T) {
	now := time.Unix(1000, 0)
	var evicted []string
	c := newLRU[string, int](10, func(k string, _ int) { evicted = append(evicted, k) })
	c.now = func() time.Time { return now }
	for _, k := range []string{"a", "b", "c"} {
		c.add(k, 0)
		now = now.Add(time.Second)
	}
	c.get("a") // used last now
	assert.Equal(t, 0, c.expireBefore(time.Unix(1000, 0)))
	assert.Equal(t, 2, c.expireBefore(time.Unix(1002, 500)))
	assert.Equal(t, []string{"b", "c"}, evicted)
	assert.Equal(t, 1, c.len())
}
