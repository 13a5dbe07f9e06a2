package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func TestUserNative(t *testing.T) {
	tests := []struct {
		name     string
		compiler string
		src      string
		flags    []string
		// want maps a printed address name to the expected function; the
		// address is looked up as the leaf, or as a caller frame when
		// caller is set.
		want   map[string]string
		caller map[string]bool
	}{
		{
			name: "c pie", compiler: "cc", src: "cprog.c", flags: []string{"-pie", "-fPIE"},
			want:   map[string]string{"leaf_func": "leaf_func", "mid_func": "mid_func", "mid_func_ret": "mid_func"},
			caller: map[string]bool{"mid_func_ret": true},
		},
		{
			name: "c no-pie", compiler: "cc", src: "cprog.c", flags: []string{"-no-pie"},
			want:   map[string]string{"leaf_func": "leaf_func", "mid_func": "mid_func", "mid_func_ret": "mid_func"},
			caller: map[string]bool{"mid_func_ret": true},
		},
		{
			name: "c++", compiler: "c++", src: "cxxprog.cc",
			want: map[string]string{"shapes::perimeter": "shapes::perimeter(int)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := buildC(t, tt.compiler, tt.src, tt.flags...)
			pid, addrs := runFixture(t, bin)
			s := New(Options{Proc: procfs.FS{Root: "/proc"}})
			defer s.Close()
			for key, fn := range tt.want {
				addr, ok := addrs[key]
				require.True(t, ok, key)
				stack := []uint64{addr}
				if tt.caller[key] {
					stack = []uint64{addrs["leaf_func"], addr}
				}
				frames := s.User(pid, stack)
				require.Len(t, frames, len(stack))
				f := frames[len(frames)-1]
				assert.Equal(t, fn, f.Function, key)
				assert.Equal(t, addr, f.Address, "original address kept")
				assert.Equal(t, report.FrameNative, f.Type)
				require.NotNil(t, f.Mapping)
				assert.Equal(t, bin, f.Mapping.File)
				assert.NotEmpty(t, f.Mapping.BuildIDGNU, "gcc on Debian emits a GNU build id")
			}
			st := s.Stats()
			assert.EqualValues(t, 0, st.FramesUnsymbolized)
			assert.EqualValues(t, 0, st.FileErrors)
		})
	}
}

func TestUserGo(t *testing.T) {
	tests := []struct {
		name       string
		flags      []string
		wantInline bool
	}{
		{name: "default", wantInline: true},
		{name: "pie", flags: []string{"-buildmode=pie"}, wantInline: true},
		{name: "stripped", flags: []string{"-ldflags=-s -w"}}, // no go:func.* symbol: no inline tree
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := buildGo(t, tt.flags...)
			pid, addrs := runFixture(t, bin)
			s := New(Options{})
			defer s.Close()

			// crunch entry as the leaf, a return address into hotLoop
			// (called directly) and one into the inlined add.
			frames := s.User(pid, []uint64{addrs["crunch"], addrs["direct_pc"], addrs["inlined_pc"]})
			for _, f := range frames {
				assert.Equal(t, report.FrameGo, f.Type, f.Function)
				require.NotNil(t, f.Mapping)
				assert.NotEmpty(t, f.Mapping.BuildIDGo)
				assert.Equal(t, bin, f.Mapping.File)
			}
			want := []report.Frame{
				{Address: addrs["crunch"], Function: "main.crunch", Line: 46},
				{Address: addrs["direct_pc"], Function: "main.(*Cruncher).hotLoop", Line: 42},
			}
			if tt.wantInline {
				want = append(want,
					report.Frame{Address: addrs["inlined_pc"], Function: "main.(*Cruncher).add", Line: 32, Inlined: true},
					report.Frame{Address: addrs["inlined_pc"], Function: "main.(*Cruncher).hotLoop", Line: 40})
			} else {
				want = append(want, report.Frame{Address: addrs["inlined_pc"], Function: "main.(*Cruncher).hotLoop", Line: 32})
			}
			require.Len(t, frames, len(want))
			for i, w := range want {
				got := frames[i]
				assert.Equal(t, w.Address, got.Address, i)
				assert.Equal(t, w.Function, got.Function, i)
				assert.Equal(t, w.Line, got.Line, "%d %s", i, w.Function)
				assert.Equal(t, w.Inlined, got.Inlined, i)
				assert.Equal(t, "main.go", filepath.Base(got.File))
			}
			assert.EqualValues(t, 3, s.Stats().FramesResolved)
		})
	}
}

// fakeProcess writes a fake /proc/<pid> with the given maps, exe link,
// status (owned by the test's uid) and files below its root. The device and
// inode of maps lines naming one of files are set to the written file's, as
// the kernel shows them.
func fakeProcess(t *testing.T, pid uint32, maps, exe string, files map[string][]byte) procfs.FS {
	t.Helper()
	fs := procfs.FS{Root: t.TempDir()}
	dir := fs.Path(pid)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "root"), 0o755))
	if exe != "" {
		require.NoError(t, os.Symlink(exe, filepath.Join(dir, "exe")))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte(statusOf(pid)), 0o644))
	for name, data := range files {
		p := fs.RootPath(pid, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	var lines []string
	for _, line := range strings.SplitAfter(maps, "\n") {
		if f := strings.Fields(line); len(f) == 6 && files[f[5]] != nil {
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(fs.RootPath(pid, f[5]), &st))
			f[3] = fmt.Sprintf("%x:%x", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)))
			f[4] = strconv.FormatUint(st.Ino, 10)
			line = strings.Join(f, " ") + "\n"
		}
		lines = append(lines, line)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "")), 0o644))
	return fs
}

// statusOf is a status file of process pid running as the test's uid.
func statusOf(pid uint32, extra ...string) string {
	uid := os.Getuid()
	return fmt.Sprintf("Name:\tapp\nTgid:\t%d\nUid:\t%d\t%d\t%d\t%d\n%s", pid, uid, uid, uid, uid, strings.Join(extra, ""))
}

func TestUserMalformedELF(t *testing.T) {
	garbage := []byte("\x7fELF\x02\x01\x01\x00garbage garbage garbage garbage garbage garbage garbage garbage")
	maps := "00400000-00500000 r-xp 00000000 fd:01 77 /garbage.so\n" +
		"00600000-00700000 r-xp 00000000 fd:01 78 /missing.so\n" +
		"00800000-00900000 r-xp 00000000 fd:01 79 /text.so\n"
	fs := fakeProcess(t, 42, maps, "/usr/bin/app", map[string][]byte{
		"/garbage.so": garbage,
		"/text.so":    []byte("not an elf at all"),
	})
	s := New(Options{Proc: fs})
	stacks := [][]uint64{{0x400010, 0x600020, 0x800030, 0x12345}, {0x400010, 0x600020}}
	for _, stack := range stacks {
		frames := s.User(42, stack)
		require.Len(t, frames, len(stack), "frames are never dropped")
		for i, f := range frames {
			assert.Equal(t, stack[i], f.Address)
			assert.Empty(t, f.Function)
		}
		assert.Equal(t, "/garbage.so", frames[0].Mapping.File)
		assert.Equal(t, "/missing.so", frames[1].Mapping.File)
	}
	st := s.Stats()
	assert.EqualValues(t, 6, st.FramesUnsymbolized)
	assert.EqualValues(t, 0, st.FramesResolved)
	// /missing.so is neither in the root nor in map_files (which the fake
	// /proc has none of): the mapping is gone, which is no file's error.
	assert.EqualValues(t, 2, st.FileErrors, "each bad file is read once")
	_, cached := s.files.get(keyOf(procfs.Map{DevMajor: 0xfd, DevMinor: 1, Inode: 78, Path: "/missing.so"}))
	assert.False(t, cached, "a mapping gone is not cached as its file's")

	// A vanished process.
	frames := s.User(4242, []uint64{0x1000, 0x2000})
	require.Len(t, frames, 2)
	assert.Nil(t, frames[0].Mapping)
	assert.EqualValues(t, 8, s.Stats().FramesUnsymbolized)
}

func TestUserPerfMap(t *testing.T) {
	maps := "7f0000000000-7f0000100000 r-xp 00000000 00:00 0 \n" +
		"7f0000200000-7f0000300000 r-xp 00000000 00:00 0 [anon:v8]\n"
	perf := "7f0000001000 100 LazyCompile:*handler /app/server.js:10\n" +
		"0x7f0000200000 0x40 Builtin:ArgumentsAdaptorTrampoline\n" +
		"garbage line\n"
	for _, exe := range []string{"/usr/local/bin/node", "/opt/app/java"} {
		t.Run(exe, func(t *testing.T) {
			fs := fakeProcess(t, 42, maps, exe, map[string][]byte{"/tmp/perf-42.map": []byte(perf)})
			s := New(Options{Proc: fs})
			s.refreshInterval = 0
			frames := s.User(42, []uint64{0x7f0000001010, 0x7f0000200011, 0x7f0000005000, 0x1000})
			require.Len(t, frames, 4)
			assert.Equal(t, "LazyCompile:*handler /app/server.js:10", frames[0].Function)
			assert.Equal(t, report.FrameJIT, frames[0].Type, "assemble names the runtime")
			assert.Equal(t, "Builtin:ArgumentsAdaptorTrampoline", frames[1].Function)
			assert.Empty(t, frames[2].Function)
			assert.NotNil(t, frames[2].Mapping)
			assert.Empty(t, frames[3].Function)
			assert.Nil(t, frames[3].Mapping)
			assert.Same(t, frames[0].Mapping, frames[2].Mapping, "one Mapping value per mapping")

			// The JIT appends; the file is re-read because its size changed.
			f, err := os.OpenFile(fs.RootPath(42, "/tmp/perf-42.map"), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString("7f0000005000 20 LazyCompile:later\n")
			require.NoError(t, err)
			require.NoError(t, f.Close())
			frames = s.User(42, []uint64{0x7f0000005004})
			assert.Equal(t, "LazyCompile:later", frames[0].Function)
		})
	}
}

// Code a JIT names just after the perf map was read is named at the next
// lookup that misses it, 100 ms later, not only after the refresh interval.
func TestUserPerfMapRereadOnMiss(t *testing.T) {
	maps := "7f0000000000-7f0000100000 r-xp 00000000 00:00 0 \n"
	fs := fakeProcess(t, 42, maps, "/usr/bin/node", map[string][]byte{"/tmp/perf-42.map": []byte("7f0000001000 100 JS:*early\n")})
	s := New(Options{Proc: fs})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	assert.Equal(t, "JS:*early", s.User(42, []uint64{0x7f0000001010})[0].Function)

	f, err := os.OpenFile(fs.RootPath(42, "/tmp/perf-42.map"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("7f0000002000 100 JS:*late\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	now = now.Add(50 * time.Millisecond)
	assert.Empty(t, s.User(42, []uint64{0x7f0000002010})[0].Function, "read 50 ms ago: not again")
	now = now.Add(60 * time.Millisecond)
	assert.Equal(t, "JS:*early", s.User(42, []uint64{0x7f0000001010})[0].Function, "a hit reads nothing")
	assert.Equal(t, "JS:*late", s.User(42, []uint64{0x7f0000002010})[0].Function, "a miss 110 ms after the read reads again")
}

func TestForgetProcessAndBounds(t *testing.T) {
	fs := fakeProcess(t, 42, "00400000-00500000 r-xp 00000000 00:00 0 \n", "/bin/x", nil)
	s := New(Options{Proc: fs, MaxProcesses: 1})
	s.User(42, []uint64{0x400000})
	s.User(43, []uint64{0x400000}) // evicts 42
	assert.Equal(t, 1, s.procs.len())
	s.ForgetProcess(43)
	assert.Equal(t, 0, s.procs.len())
	before := s.Stats().MapRefreshes
	s.User(42, []uint64{0x400000})
	assert.Equal(t, before+1, s.Stats().MapRefreshes)
	require.NoError(t, s.Close())
}

// A process in a nested pid namespace names its perf map with the pid it
// sees itself as: the innermost NSpid column, not the pid we see.
func TestUserPerfMapInNestedPIDNamespace(t *testing.T) {
	maps := "7f0000000000-7f0000100000 r-xp 00000000 00:00 0 \n"
	tests := []struct {
		name, status, mapFile string
	}{
		{name: "host process", status: statusOf(4242, "NSpid:\t4242\n"), mapFile: "/tmp/perf-4242.map"},
		{name: "two levels", status: statusOf(4242, "NSpid:\t4242\t7\n"), mapFile: "/tmp/perf-7.map"},
		{name: "three levels", status: statusOf(4242, "NSpid:\t4242\t70\t1\n"), mapFile: "/tmp/perf-1.map"},
		{name: "no NSpid line", status: statusOf(4242), mapFile: "/tmp/perf-4242.map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := fakeProcess(t, 4242, maps, "/usr/bin/node", map[string][]byte{
				tt.mapFile: []byte("7f0000001000 100 LazyCompile:*handler\n"),
			})
			require.NoError(t, os.WriteFile(fs.Path(4242, "status"), []byte(tt.status), 0o644))
			s := New(Options{Proc: fs})
			frames := s.User(4242, []uint64{0x7f0000001010})
			require.Len(t, frames, 1)
			assert.Equal(t, "LazyCompile:*handler", frames[0].Function)
		})
	}
}

// A process prefetched while it ran still symbolizes after it exited and
// its binary was deleted; one that was not, does not.
func TestPrefetchResolvesAfterExit(t *testing.T) {
	bin := buildC(t, "cc", "cprog.c", "-no-pie")
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	c := testutil.StartChild(t, cmd)
	var leaf uint64
	for _, line := range c.Until(t, testutil.Patient(time.Minute), func(line string) bool { return strings.HasPrefix(line, "ready") }) {
		if v, ok := strings.CutPrefix(line, "leaf_func="); ok {
			leaf, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, leaf)
	pid := uint32(c.Pid())

	prefetched := New(Options{Proc: procfs.FS{Root: "/proc"}})
	defer prefetched.Close()
	prefetched.Prefetch(pid)
	late := New(Options{Proc: procfs.FS{Root: "/proc"}})
	defer late.Close()

	require.NoError(t, stdin.Close())
	require.NoError(t, c.Wait(t, testutil.Patient(time.Minute)))
	require.NoError(t, os.Remove(bin))

	assert.Equal(t, "leaf_func", prefetched.User(pid, []uint64{leaf})[0].Function)
	assert.Equal(t, "leaf_func", prefetched.UserExited(pid, []uint64{leaf})[0].Function)
	assert.Empty(t, late.User(pid, []uint64{leaf})[0].Function)
}

// UserExited reads nothing of the process: before anything was read its
// frames keep their addresses only; after, it names them with what was read
// (maps, perf map), however old.
func TestUserExitedReadsNothing(t *testing.T) {
	maps := "7f0000000000-7f0000100000 r-xp 00000000 00:00 0 \n"
	fs := fakeProcess(t, 4242, maps, "/usr/bin/node", map[string][]byte{
		"/tmp/perf-4242.map": []byte("7f0000001000 100 JS:*early\n"),
	})
	s := New(Options{Proc: fs})
	early, late := uint64(0x7f0000001010), uint64(0x7f0000002010)

	frames := s.UserExited(4242, []uint64{early})
	assert.Equal(t, []report.Frame{{Address: early, Type: report.FrameNative}}, frames)
	assert.Zero(t, s.Stats().MapRefreshes, "maps read for a process that exited")

	assert.Equal(t, "JS:*early", s.User(4242, []uint64{early})[0].Function)
	require.Equal(t, uint64(1), s.Stats().MapRefreshes)
	require.NoError(t, os.WriteFile(fs.RootPath(4242, "/tmp/perf-4242.map"),
		[]byte("7f0000001000 100 JS:*early\n7f0000002000 100 JS:*late\n"), 0o644))
	s.now = func() time.Time { return time.Now().Add(time.Hour) } // every re-read is allowed

	frames = s.UserExited(4242, []uint64{early, late})
	assert.Equal(t, "JS:*early", frames[0].Function, "what was read before is used")
	assert.Empty(t, frames[1].Function, "the perf map was read again")
	assert.Equal(t, uint64(1), s.Stats().MapRefreshes, "the maps were read again")
	assert.Equal(t, "JS:*late", s.User(4242, []uint64{late})[0].Function, "User reads again")
}
