//go:build linux

package procfs

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeRoot returns a fake /proc holding process 42 whose root is a
// directory, and that directory.
func fakeRoot(t *testing.T) (FS, string) {
	t.Helper()
	fs := FS{Root: t.TempDir()}
	root := fs.Path(42, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	return fs, root
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return string(b)
}

// openers runs a test with openat2 and with the walk older kernels take.
func openers(t *testing.T, fn func(t *testing.T, fallback bool)) {
	t.Run("openat2", func(t *testing.T) { fn(t, false) })
	t.Run("no openat2", func(t *testing.T) {
		old := openat2
		openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
		t.Cleanup(func() { openat2 = old; noOpenat2.Store(false) })
		fn(t, true)
	})
}

func TestOpenInRoot(t *testing.T) {
	openers(t, func(t *testing.T, fallback bool) {
		fs, root := fakeRoot(t)
		require.NoError(t, os.WriteFile(filepath.Join(root, "tmp", "ok.map"), []byte("inside"), 0o644))
		f, err := fs.OpenInRoot(42, "/tmp/ok.map")
		require.NoError(t, err)
		assert.Equal(t, "inside", readAll(t, f))
		assert.Equal(t, fs.RootPath(42, "/tmp/ok.map"), f.Name())

		// ".." cannot climb out of the root: it stops there.
		f, err = fs.OpenInRoot(42, "/../../../tmp/ok.map")
		require.NoError(t, err)
		assert.Equal(t, "inside", readAll(t, f))
		_, err = fs.OpenInRoot(42, "/missing")
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// A FIFO is refused at once: opening it does not wait for a writer.
func TestOpenInRootFIFO(t *testing.T) {
	openers(t, func(t *testing.T, _ bool) {
		fs, root := fakeRoot(t)
		require.NoError(t, unix.Mkfifo(filepath.Join(root, "tmp", "perf-42.map"), 0o666))
		done := make(chan error, 1)
		go func() {
			f, err := fs.OpenInRoot(42, "/tmp/perf-42.map")
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			assert.Equal(t, ReasonNotRegular, RefusalReason(err), "%v", err)
		case <-time.After(2 * time.Second):
			t.Fatal("opening a FIFO blocked")
		}
	})
}

// A symbolic link as last component is refused, wherever it points.
func TestOpenInRootSymlinkRefused(t *testing.T) {
	openers(t, func(t *testing.T, _ bool) {
		fs, root := fakeRoot(t)
		secret := filepath.Join(t.TempDir(), "secret")
		require.NoError(t, os.WriteFile(secret, []byte("ffff 10 root_only_secret\n"), 0o600))
		require.NoError(t, os.Symlink(secret, filepath.Join(root, "tmp", "abs.map")))
		require.NoError(t, os.WriteFile(filepath.Join(root, "tmp", "target"), []byte("x"), 0o644))
		require.NoError(t, os.Symlink("target", filepath.Join(root, "tmp", "rel.map")))
		for _, p := range []string{"/tmp/abs.map", "/tmp/rel.map"} {
			f, err := fs.OpenInRoot(42, p)
			assert.Nil(t, f)
			assert.Equal(t, ReasonSymlink, RefusalReason(err), "%s: %v", p, err)
		}
	})
}

// An absolute symbolic link on the way is resolved inside the process's
// root, never in the collector's: a process cannot make us read a host file.
func TestOpenInRootAbsoluteLinkStaysInRoot(t *testing.T) {
	fs, root := fakeRoot(t)
	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "perf-42.map"), []byte("host file"), 0o644))
	// <root>/jit -> <host>: as the process sees it, a link to <host>
	// inside its own root.
	require.NoError(t, os.Symlink(host, filepath.Join(root, "jit")))
	_, err := fs.OpenInRoot(42, "/jit/perf-42.map")
	require.ErrorIs(t, err, os.ErrNotExist, "the host file must not be reached")

	// The same path inside the root is what the link names.
	require.NoError(t, os.MkdirAll(filepath.Join(root, host), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, host, "perf-42.map"), []byte("in root"), 0o644))
	f, err := fs.OpenInRoot(42, "/jit/perf-42.map")
	require.NoError(t, err)
	assert.Equal(t, "in root", readAll(t, f))

	// Before openat2 such a link is not followed at all.
	old := openat2
	openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	defer func() { openat2 = old; noOpenat2.Store(false) }()
	_, err = fs.OpenInRoot(42, "/jit/perf-42.map")
	assert.Equal(t, ReasonSymlink, RefusalReason(err), "%v", err)
}

// Magic links (/proc/<pid>/root, /proc/self/fd/N) inside the process's tree
// are refused: they would lead anywhere the kernel's link leads.
func TestOpenInRootMagicLinkRefused(t *testing.T) {
	fs := FS{Root: t.TempDir()}
	require.NoError(t, os.MkdirAll(fs.Path(42), 0o755))
	require.NoError(t, os.Symlink("/", fs.Path(42, "root")))
	f, err := fs.OpenInRoot(42, "/proc/self/root/etc/hostname")
	assert.Nil(t, f)
	assert.Equal(t, ReasonSymlink, RefusalReason(err), "%v", err)
	f, err = fs.OpenInRoot(42, "/etc/hostname")
	require.NoError(t, err, "a plain path through a linked root opens")
	f.Close()
}

func TestOpenMappedFile(t *testing.T) {
	self := uint32(os.Getpid())
	fs := FS{Root: "/proc"}
	maps, err := fs.Maps(self)
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	var m Map
	for _, mm := range maps {
		if mm.Executable() && mm.Path == exe {
			m = mm
		}
	}
	require.NotZero(t, m.Inode, "test binary not in maps")
	var want unix.Stat_t
	require.NoError(t, unix.Stat(exe, &want))

	f, err := fs.OpenMappedFile(self, m)
	require.NoError(t, err)
	st, err := fstat(f)
	require.NoError(t, err)
	assert.Equal(t, want.Ino, st.Ino)
	f.Close()

	// Another file under the mapped name is not read: map_files gives the
	// mapped file itself, or nothing.
	other := m
	other.Inode++
	f, err = fs.OpenMappedFile(self, other)
	if os.Geteuid() == 0 {
		require.NoError(t, err, "root reads map_files")
		st, err = fstat(f)
		require.NoError(t, err)
		assert.Equal(t, want.Ino, st.Ino, "the mapped file, from map_files")
		f.Close()
	} else {
		assert.Equal(t, ReasonReplaced, RefusalReason(err), "%v", err)
	}

	// In a fake /proc without map_files, the replaced file is refused.
	fake, root := fakeRoot(t)
	lib := filepath.Join(root, "lib.so")
	require.NoError(t, os.WriteFile(lib, []byte("x"), 0o644))
	require.NoError(t, unix.Stat(lib, &want))
	m = Map{Start: 0x1000, End: 0x2000, Perms: "r-xp", DevMajor: unix.Major(want.Dev), DevMinor: unix.Minor(want.Dev), Inode: want.Ino, Path: "/lib.so"}
	f, err = fake.OpenMappedFile(42, m)
	require.NoError(t, err)
	f.Close()
	m.Inode++
	_, err = fake.OpenMappedFile(42, m)
	assert.Equal(t, ReasonReplaced, RefusalReason(err), "%v", err)
	// A FIFO under the mapped name is refused too.
	require.NoError(t, os.Remove(lib))
	require.NoError(t, unix.Mkfifo(lib, 0o644))
	_, err = fake.OpenMappedFile(42, m)
	assert.Equal(t, ReasonNotRegular, RefusalReason(err), "%v", err)
}

func TestCheckOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	name := filepath.Join(t.TempDir(), "perf.map")
	require.NoError(t, os.WriteFile(name, nil, 0o644))
	tests := []struct {
		owner  int
		status Status
		ok     bool
	}{
		{owner: 0, status: Status{Uid: 1000, EUid: 1000}, ok: true},
		{owner: 1000, status: Status{Uid: 1000, EUid: 1000}, ok: true},
		{owner: 1000, status: Status{Uid: 2000, EUid: 1000}, ok: true},
		{owner: 12345, status: Status{Uid: 1000, EUid: 1000}},
		{owner: 1000, status: Status{Uid: 0, EUid: 0}},
	}
	for _, tt := range tests {
		require.NoError(t, os.Chown(name, tt.owner, -1))
		f, err := os.Open(name)
		require.NoError(t, err)
		err = CheckOwner(f, tt.status)
		f.Close()
		if tt.ok {
			assert.NoError(t, err, "%+v", tt)
		} else {
			assert.Equal(t, ReasonOwner, RefusalReason(err), "%+v: %v", tt, err)
		}
	}
}

func TestDeadline(t *testing.T) {
	d := NewDeadline(50*time.Millisecond, 2)
	release := make(chan struct{})
	discarded := make(chan string, 1)
	stuck := func() (string, error) { <-release; return "late", nil }

	// A second call while the first is within its deadline is refused as
	// busy: the first caller gets the answer.
	patient := NewDeadline(time.Minute, 2)
	slow := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := Within(patient, "a", func() (string, error) { <-slow; return "", nil }, nil)
		first <- err
	}()
	require.Eventually(t, func() bool { return patient.Busy("a") }, 5*time.Second, time.Millisecond)
	_, err := Within(patient, "a", func() (string, error) { return "", nil }, nil)
	assert.Equal(t, ReasonBusy, RefusalReason(err), "%v", err)
	close(slow)
	require.NoError(t, <-first)

	t0 := time.Now()
	_, err = Within(d, "a", stuck, func(v string) { discarded <- v })
	assert.Equal(t, ReasonTimeout, RefusalReason(err), "%v", err)
	assert.Less(t, time.Since(t0), time.Second)
	assert.Equal(t, 1, d.InFlight())

	// The stuck file is not tried again while its call is in flight.
	called := false
	_, err = Within(d, "a", func() (string, error) { called = true; return "", nil }, nil)
	assert.Equal(t, ReasonStuck, RefusalReason(err))
	assert.False(t, called)

	// Other files are.
	v, err := Within(d, "b", func() (string, error) { return "fast", nil }, nil)
	require.NoError(t, err)
	assert.Equal(t, "fast", v)
	_, err = Within(d, "c", func() (string, error) { return "", errors.New("boom") }, nil)
	assert.EqualError(t, err, "boom")

	// At most two in flight: a second stuck one, then a third is refused.
	_, err = Within(d, "d", stuck, nil)
	assert.Equal(t, ReasonTimeout, RefusalReason(err))
	_, err = Within(d, "e", func() (string, error) { return "", nil }, nil)
	assert.Equal(t, ReasonStuck, RefusalReason(err))
	assert.True(t, strings.Contains(err.Error(), "2 opens or reads"), err.Error())

	close(release)
	select {
	case v := <-discarded:
		assert.Equal(t, "late", v)
	case <-time.After(5 * time.Second):
		t.Fatal("the late result was not discarded")
	}
	require.Eventually(t, func() bool { return d.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	_, err = Within(d, "a", func() (string, error) { return "", nil }, nil)
	assert.NoError(t, err, "a file whose call returned is read again")
}

// The file of a mapping of a process that has exited is not opened, and
// the error says the mapping is gone (not that the file is bad).
func TestOpenMappedFileOfAnExitedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	pid := uint32(cmd.Process.Pid)
	fs := FS{Root: "/proc"}
	var m Map
	require.Eventually(t, func() bool {
		maps, err := fs.Maps(pid)
		require.NoError(t, err)
		for _, mm := range maps {
			if mm.Executable() && strings.HasSuffix(mm.Path, "/sleep") {
				m = mm
			}
		}
		return m.Inode != 0
	}, 5*time.Second, 5*time.Millisecond, "sleep's own mapping")
	f, err := fs.OpenMappedFile(pid, m)
	require.NoError(t, err, "alive")
	f.Close()

	require.NoError(t, cmd.Process.Kill())
	reaped := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed: its error says so
		close(reaped)
	}()
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("sleep not reaped 10 s after SIGKILL")
	}
	_, err = fs.OpenMappedFile(pid, m)
	require.ErrorIs(t, err, ErrMappingGone)
	assert.Empty(t, RefusalReason(err), "not refused: gone")
}
