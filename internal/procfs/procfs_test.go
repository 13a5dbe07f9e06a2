package procfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mapsFixture = `55d0c5a00000-55d0c5a01000 r--p 00000000 fd:01 1234                       /usr/bin/prog
55d0c5a01000-55d0c5a02000 r-xp 00001000 fd:01 1234                       /usr/bin/prog
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 
7f1c2b000000-7f1c2b100000 r-xp 00000000 103:02 99                        /tmp/my lib.so (deleted)
7ffd1e3f0000-7ffd1e411000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
7f1c2c000000-7f1c2c100000 r-xs 00200000 00:01 2048                       /dev/zero (deleted)
7f1c2d000000-7f1c2d100000 rw-s 00000000 00:01 32770                      /SYSV0001e240 (deleted)
7f1c2e000000-7f1c2e100000 r-xp 00000000 00:01 4096                       /memfd:runc_cloned:/proc/self/exe (deleted)
`

func TestParseMaps(t *testing.T) {
	maps, err := ParseMaps(strings.NewReader(mapsFixture))
	require.NoError(t, err)
	require.Len(t, maps, 9)
	assert.Equal(t, Map{Start: 0x55d0c5a01000, End: 0x55d0c5a02000, Offset: 0x1000, Perms: "r-xp",
		DevMajor: 0xfd, DevMinor: 1, Inode: 1234, Path: "/usr/bin/prog"}, maps[1])
	assert.True(t, maps[1].Executable())
	assert.True(t, maps[1].FileBacked())
	assert.Equal(t, "", maps[2].Path)
	assert.False(t, maps[2].FileBacked())
	assert.Equal(t, "/tmp/my lib.so (deleted)", maps[3].Path)
	assert.Equal(t, uint32(0x103), maps[3].DevMajor)
	assert.True(t, maps[3].Deleted())
	assert.Equal(t, "[stack]", maps[4].Path)
	assert.True(t, maps[5].Contains(0xffffffffff600500))
	assert.False(t, maps[6].FileBacked(), "shared anonymous memory")
	assert.False(t, maps[7].FileBacked(), "a System V segment")
	assert.True(t, maps[8].FileBacked(), "a memfd holds a file (runc runs from one)")
}

// ParseExecMaps keeps the executable mappings, and skips the other lines
// unparsed: a malformed one among them is no error.
func TestParseExecMaps(t *testing.T) {
	all, err := ParseMaps(strings.NewReader(mapsFixture))
	require.NoError(t, err)
	exec, err := ParseExecMaps(strings.NewReader(mapsFixture + "00400000 rw-p 00000000 fd:01 1 /x\n"))
	require.NoError(t, err)
	assert.Equal(t, []Map{all[1], all[3], all[5], all[6], all[8]}, exec)
	_, err = ParseExecMaps(strings.NewReader("00400000 r-xp 00000000 fd:01 1 /x\n"))
	assert.Error(t, err, "a malformed executable line")
}

func TestParseMapsErrors(t *testing.T) {
	for name, line := range map[string]string{
		"short":       "00400000-00401000 r-xp 00000000 fd:01",
		"no dash":     "00400000 r-xp 00000000 fd:01 1 /x",
		"bad start":   "zz-00401000 r-xp 00000000 fd:01 1 /x",
		"bad end":     "00400000-zz r-xp 00000000 fd:01 1 /x",
		"reversed":    "00500000-00401000 r-xp 00000000 fd:01 1 /x",
		"bad perms":   "00400000-00401000 rx 00000000 fd:01 1 /x",
		"bad offset":  "00400000-00401000 r-xp 0x0g fd:01 1 /x",
		"bad dev":     "00400000-00401000 r-xp 00000000 fd01 1 /x",
		"bad dev hex": "00400000-00401000 r-xp 00000000 fz:01 1 /x",
		"bad inode":   "00400000-00401000 r-xp 00000000 fd:01 -1 /x",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseMaps(strings.NewReader(line + "\n"))
			assert.Error(t, err)
		})
	}
}

const statusFixture = `Name:	my prog
Umask:	0022
State:	S (sleeping)
Tgid:	4242
Ngid:	0
Pid:	4242
PPid:	1
TracerPid:	0
Uid:	1000	1000	1000	1000
Gid:	1000	1000	1000	1000
NSpid:	4242	17	1
NSpgid:	4242	17	1
`

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Status
		wantErr bool
	}{
		{name: "full", in: statusFixture, want: Status{Name: "my prog", Tgid: 4242, PPid: 1, NSpid: []uint32{4242, 17, 1}, Uid: 1000, EUid: 1000}},
		{name: "setuid", in: "Uid:\t1000\t0\t0\t0\n", want: Status{Uid: 1000, EUid: 0}},
		{name: "one uid column", in: "Uid:\t7\n", want: Status{Uid: 7, EUid: 7}},
		{name: "garbage euid", in: "Uid:\t7\tx\n", wantErr: true},
		{name: "host nspid", in: "Name:\tinit\nTgid:\t1\nNSpid:\t1\n", want: Status{Name: "init", Tgid: 1, NSpid: []uint32{1}}},
		{name: "two level nspid", in: "Tgid:\t9876\nNSpid:\t9876\t1\n", want: Status{Tgid: 9876, NSpid: []uint32{9876, 1}}},
		{name: "spaces nspid", in: "NSpid:  300   12  \n", want: Status{NSpid: []uint32{300, 12}}},
		{name: "overflow nspid", in: "NSpid:\t4294967296\n", wantErr: true},
		{name: "negative nspid", in: "NSpid:\t5\t-1\n", wantErr: true},
		{name: "no nspid", in: "Name:\tx\nTgid:\t5\nPPid:\t0\n", want: Status{Name: "x", Tgid: 5}},
		{name: "garbage nspid", in: "Name:\tx\nNSpid:\t5 abc\n", wantErr: true},
		{name: "empty nspid", in: "NSpid:\t\n", wantErr: true},
		{name: "garbage tgid", in: "Tgid:\t-3\n", wantErr: true},
		{name: "garbage uid", in: "Uid:\tx\n", wantErr: true},
		{name: "empty", in: "", want: Status{}},
		{name: "no colon lines", in: "hello\nworld\n", want: Status{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus(strings.NewReader(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseStatStartTime(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{name: "plain", in: "123 (bash) S 1 123 123 34816 123 4194560 1 2 3 4 5 6 7 8 20 0 1 0 987654 1000 100 18446744073709551615", want: 987654},
		{name: "spaces and parens", in: "77 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20", want: 4242},
		{name: "no paren", in: "77 a R 1", wantErr: true},
		{name: "short", in: "77 (a) R 1 2 3", wantErr: true},
		{name: "not a number", in: "77 (a) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatStartTime([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// fakeProc builds a fake /proc with one process 42.
func fakeProc(t *testing.T) FS {
	root := t.TempDir()
	dir := filepath.Join(root, "42")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "task", "43"), 0o755))
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("maps", mapsFixture)
	write("status", statusFixture)
	write("comm", "my prog\n")
	write("task/43/comm", "worker-1\n")
	write("stat", "42 (my (prog)) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 5555 1000 100")
	require.NoError(t, os.Symlink("/usr/bin/prog (deleted)", filepath.Join(dir, "exe")))
	return FS{Root: root}
}

func TestFS(t *testing.T) {
	fs := fakeProc(t)
	maps, err := fs.Maps(42)
	require.NoError(t, err)
	assert.Len(t, maps, 9)

	exe, err := fs.Exe(42)
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/prog", exe)

	comm, err := fs.Comm(42)
	require.NoError(t, err)
	assert.Equal(t, "my prog", comm)

	tcomm, err := fs.ThreadComm(42, 43)
	require.NoError(t, err)
	assert.Equal(t, "worker-1", tcomm)

	st, err := fs.Status(42)
	require.NoError(t, err)
	assert.Equal(t, []uint32{4242, 17, 1}, st.NSpid)

	start, err := fs.StartTime(42)
	require.NoError(t, err)
	assert.Equal(t, uint64(5555), start)

	assert.Equal(t, fs.Root+"/42/root/usr/lib/libc.so.6", fs.RootPath(42, "/usr/lib/libc.so.6"))
}

func TestFSMissingProcess(t *testing.T) {
	fs := fakeProc(t)
	for name, f := range map[string]func() error{
		"maps":   func() error { _, err := fs.Maps(7); return err },
		"exe":    func() error { _, err := fs.Exe(7); return err },
		"comm":   func() error { _, err := fs.Comm(7); return err },
		"thread": func() error { _, err := fs.ThreadComm(42, 7); return err },
		"status": func() error { _, err := fs.Status(7); return err },
		"stat":   func() error { _, err := fs.StartTime(7); return err },
	} {
		err := f()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), fs.Root, name) // wrapped with the file name
		assert.ErrorIs(t, err, os.ErrNotExist, name)
	}
}

func TestFSSelf(t *testing.T) {
	fs := FS{} // defaults to /proc
	pid := uint32(os.Getpid())
	maps, err := fs.Maps(pid)
	require.NoError(t, err)
	assert.NotEmpty(t, maps)
	st, err := fs.Status(pid)
	require.NoError(t, err)
	assert.Equal(t, pid, st.Tgid)
	// The main thread's start time is the process's.
	start, err := fs.StartTime(pid)
	require.NoError(t, err)
	b, err := os.ReadFile("/proc/self/stat")
	require.NoError(t, err)
	want, err := ParseStatStartTime(b)
	require.NoError(t, err)
	assert.Equal(t, want, start)
}

func FuzzParseMaps(f *testing.F) {
	f.Add(mapsFixture)
	f.Add("0-1 r-xp 0 0:0 0")
	f.Add("ffffffffffffffff-0 ---- 0 :0 0 x")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := ParseMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		var exec []Map
		for _, m := range maps {
			if m.End < m.Start || len(m.Perms) != 4 {
				t.Fatalf("invalid map accepted: %+v", m)
			}
			if m.Executable() {
				exec = append(exec, m)
			}
		}
		got, err := ParseExecMaps(strings.NewReader(s))
		if err != nil || !slices.Equal(got, exec) {
			t.Fatalf("ParseExecMaps = %+v, %v; want the executable ones of ParseMaps, %+v", got, err, exec)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add(statusFixture)
	f.Add("NSpid:\t1 2 3\n")
	f.Add("NSpid:\n")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStatus(strings.NewReader(s))
		if err == nil && st.NSpid != nil && len(st.NSpid) == 0 {
			t.Fatalf("empty non-nil NSpid")
		}
	})
}
