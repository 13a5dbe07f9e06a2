package symbolize

import (
	"debug/elf"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// debugFixture is debugprog.c built with -g, its debug file split off with
// objcopy --only-keep-debug and the binary stripped of every symbol table
// but .dynsym (-rdynamic exports main there, never the static hidden_func).
type debugFixture struct {
	bin     string // stripped binary
	debug   string // its debug file, outside every place it is looked for
	buildID string
}

// otherBuildID is the build id of the "other build" fixture: the same code
// with another build id, whose debug file would name the functions right
// but must not be used.
const otherBuildID = "0123456789abcdef0123456789abcdef01234567"

func buildDebugFixture(t *testing.T, flags ...string) debugFixture {
	t.Helper()
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	bin := buildC(t, "cc", "debugprog.c", append([]string{"-g", "-pthread", "-rdynamic"}, flags...)...)
	debug := filepath.Join(t.TempDir(), "debugprog.debug")
	build(t, ".", nil, "objcopy", "--only-keep-debug", bin, debug)
	build(t, ".", nil, "objcopy", "--strip-all", bin)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	require.Nil(t, f.Section(".symtab"), "stripped")
	dyn, err := f.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range dyn {
		require.NotEqual(t, "hidden_func", s.Name, "a static function is in no dynamic symbol table")
	}
	id := gnuBuildID(f)
	require.NotEmpty(t, id, "gcc on Debian emits a GNU build id")
	return debugFixture{bin: bin, debug: debug, buildID: id}
}

// place copies src to dst, creating dst's directory.
func place(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, b, 0o644))
}

func buildIDPath(root, id string) string {
	return filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
}

func TestDebugFile(t *testing.T) {
	fx := buildDebugFixture(t)
	other := buildDebugFixture(t, "-Wl,--build-id=0x"+otherBuildID)
	require.Equal(t, otherBuildID, other.buildID)

	// link adds a .gnu_debuglink naming debug (with its CRC) to the binary.
	link := func(t *testing.T, bin, debug string) {
		build(t, ".", nil, "objcopy", "--add-gnu-debuglink="+debug, bin)
	}
	tests := []struct {
		name string
		// setup places debug files for the binary bin (a copy of fx.bin)
		// below the debug directory root.
		setup          func(t *testing.T, bin, root string)
		wantHidden     bool // hidden_func is named
		wantDebugFiles uint64
		wantErrors     uint64
		wantRefused    map[string]uint64
	}{
		{name: "no debug file", setup: func(*testing.T, string, string) {}},
		{
			name: "by build id",
			setup: func(t *testing.T, _, root string) {
				place(t, fx.debug, buildIDPath(root, fx.buildID))
			},
			wantHidden: true, wantDebugFiles: 1,
		},
		{
			name: "debuglink next to the binary",
			setup: func(t *testing.T, bin, _ string) {
				link(t, bin, fx.debug)
				place(t, fx.debug, filepath.Join(filepath.Dir(bin), "debugprog.debug"))
			},
			wantHidden: true, wantDebugFiles: 1,
		},
		{
			name: "debuglink in .debug",
			setup: func(t *testing.T, bin, _ string) {
				link(t, bin, fx.debug)
				place(t, fx.debug, filepath.Join(filepath.Dir(bin), ".debug", "debugprog.debug"))
			},
			wantHidden: true, wantDebugFiles: 1,
		},
		{
			name: "debuglink under the debug directory",
			setup: func(t *testing.T, bin, root string) {
				link(t, bin, fx.debug)
				place(t, fx.debug, filepath.Join(root, filepath.Dir(bin), "debugprog.debug"))
			},
			wantHidden: true, wantDebugFiles: 1,
		},
		{
			name: "debuglink with a wrong CRC",
			setup: func(t *testing.T, bin, _ string) {
				link(t, bin, fx.debug)
				dst := filepath.Join(filepath.Dir(bin), "debugprog.debug")
				place(t, fx.debug, dst)
				f, err := os.OpenFile(dst, os.O_APPEND|os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.Write([]byte{0})
				require.NoError(t, err)
				require.NoError(t, f.Close())
			},
		},
		{
			name: "another build's debug file at the build id path",
			setup: func(t *testing.T, _, root string) {
				place(t, other.debug, buildIDPath(root, fx.buildID))
			},
		},
		{
			name: "debuglink to another build's debug file (right CRC, other build id)",
			setup: func(t *testing.T, bin, _ string) {
				dst := filepath.Join(filepath.Dir(bin), "debugprog.debug")
				place(t, other.debug, dst)
				link(t, bin, dst)
			},
		},
		{
			name: "malformed debug file",
			setup: func(t *testing.T, _, root string) {
				p := buildIDPath(root, fx.buildID)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, []byte("\x7fELF\x02\x01\x01\x00 not really"), 0o644))
			},
			wantErrors: 1,
		},
		{
			name: "FIFO at the build id path",
			setup: func(t *testing.T, _, root string) {
				p := buildIDPath(root, fx.buildID)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, unix.Mkfifo(p, 0o644))
			},
			wantRefused: map[string]uint64{procfs.ReasonNotRegular: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "debugprog")
			place(t, fx.bin, bin)
			require.NoError(t, os.Chmod(bin, 0o755))
			root := t.TempDir()
			tt.setup(t, bin, root)
			pid, addrs := runFixture(t, bin)

			core, logs := observer.New(zap.InfoLevel)
			s := New(Options{Proc: procfs.Default, DebugDirs: []string{root}, Logger: zap.New(core)})
			defer s.Close()
			hidden := s.User(pid, []uint64{addrs["hidden_func"]})
			require.Len(t, hidden, 1)
			assert.Equal(t, addrs["hidden_func"], hidden[0].Address)
			require.NotNil(t, hidden[0].Mapping)
			assert.Equal(t, fx.buildID, hidden[0].Mapping.BuildIDGNU)
			// main is in .dynsym: named with or without a debug file.
			main := s.User(pid, []uint64{addrs["main"]})
			require.Len(t, main, 1)
			assert.Equal(t, "main", main[0].Function)
			if tt.wantHidden {
				assert.Equal(t, "hidden_func", hidden[0].Function)
			} else {
				assert.Empty(t, hidden[0].Function)
			}
			st := s.Stats()
			assert.Equal(t, tt.wantDebugFiles, st.DebugFiles)
			assert.Equal(t, tt.wantErrors, st.FileErrors)
			assert.Equal(t, tt.wantRefused, st.FilesRefused, "a failed search is not repeated for the second address")
			if !tt.wantHidden && tt.name != "no debug file" {
				assert.Equal(t, 1, logs.FilterMessage("debug file not used").Len(), "logged once")
			}
		})
	}
}

// The real system: Debian's libc has no .symtab and no start_thread in
// .dynsym; libc6-dbg installs its debug file under /usr/lib/debug/.build-id.
func TestDebugFileLibcStartThread(t *testing.T) {
	fx := buildDebugFixture(t)
	pid, addrs := runFixture(t, fx.bin)
	ret := addrs["start_thread_ret"]
	maps, err := procfs.Default.Maps(pid)
	require.NoError(t, err)
	var libc string
	for _, m := range maps {
		if m.Contains(ret) {
			libc = m.Path
		}
	}
	require.Contains(t, filepath.Base(libc), "libc", "the thread function returns into libc")
	f, err := elf.Open(libc)
	require.NoError(t, err)
	id := gnuBuildID(f)
	f.Close()
	if _, err := os.Stat(buildIDPath(DefaultDebugDir, id)); err != nil {
		testutil.SkipOrFail(t, "libc's debug file is not installed (apt-get install libc6-dbg; make test-tools does): %v", err)
	}

	tests := []struct {
		name      string
		debugDirs []string
		want      string
	}{
		{name: "default debug directory", want: "start_thread"},
		{name: "no debug directory", debugDirs: []string{}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{Proc: procfs.Default, DebugDirs: tt.debugDirs})
			defer s.Close()
			// The thread's stack: its function, returning into start_thread.
			frames := s.User(pid, []uint64{addrs["hidden_func"], ret})
			require.Len(t, frames, 2)
			f := frames[1]
			assert.Equal(t, tt.want, f.Function)
			assert.Equal(t, ret, f.Address)
			require.NotNil(t, f.Mapping)
			assert.Equal(t, libc, f.Mapping.File)
			assert.Equal(t, id, f.Mapping.BuildIDGNU)
			if tt.want != "" {
				assert.EqualValues(t, 1, s.Stats().DebugFiles)
			}
		})
	}
}

func TestParseDebugLink(t *testing.T) {
	fx := buildDebugFixture(t)
	build(t, ".", nil, "objcopy", "--add-gnu-debuglink="+fx.debug, fx.bin)
	data, err := os.ReadFile(fx.bin)
	require.NoError(t, err)
	f, _, err := newELF(data)
	require.NoError(t, err)
	dl, ok := parseDebugLink(f, data)
	require.True(t, ok)
	assert.Equal(t, "debugprog.debug", dl.name)
	debug, err := os.ReadFile(fx.debug)
	require.NoError(t, err)
	assert.Equal(t, crc32.ChecksumIEEE(debug), dl.crc)
}

func TestDebugCandidates(t *testing.T) {
	link := debugLink{name: "libfoo.so.debug", crc: 1}
	tests := []struct {
		name    string
		buildID string
		bin     string
		hasLink bool
		dirs    []string
		want    []debugCandidate
	}{
		{name: "nothing to go by", bin: "/usr/lib/libfoo.so"},
		{
			name: "build id and debuglink", buildID: "abcdef12", bin: "/usr/lib/libfoo.so", hasLink: true,
			dirs: []string{"/usr/lib/debug", "/opt/debug"},
			want: []debugCandidate{
				{path: "/usr/lib/debug/.build-id/ab/cdef12.debug"},
				{path: "/opt/debug/.build-id/ab/cdef12.debug"},
				{path: "/usr/lib/libfoo.so.debug", link: true},
				{path: "/usr/lib/.debug/libfoo.so.debug", link: true},
				{path: "/usr/lib/debug/usr/lib/libfoo.so.debug", link: true},
				{path: "/opt/debug/usr/lib/libfoo.so.debug", link: true},
			},
		},
		{
			name: "debuglink naming the binary itself", bin: "/usr/lib/libfoo.so.debug", hasLink: true,
			want: []debugCandidate{{path: "/usr/lib/.debug/libfoo.so.debug", link: true}},
		},
		{name: "build id too short", buildID: "ab", bin: "/x", dirs: []string{"/usr/lib/debug"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, debugCandidates(tt.buildID, tt.bin, link, tt.hasLink, tt.dirs))
		})
	}
}

// smallDebugFile returns the debug file of testdata/dynlib.c built with -g.
func smallDebugFile(tb testing.TB) ([]byte, error) {
	dir := tb.TempDir()
	lib, debug := filepath.Join(dir, "libdyn.so"), filepath.Join(dir, "libdyn.debug")
	src, err := filepath.Abs(filepath.Join("testdata", "dynlib.c"))
	if err != nil {
		return nil, err
	}
	for _, cmd := range [][]string{
		{"cc", "-shared", "-fPIC", "-O0", "-g", "-o", lib, src},
		{"objcopy", "--only-keep-debug", lib, debug},
	} {
		if err := exec.Command(cmd[0], cmd[1:]...).Run(); err != nil {
			return nil, err
		}
	}
	return os.ReadFile(debug)
}

func FuzzDebugFile(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if seed, err := smallDebugFile(f); err == nil {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ef *elf.File
		func() {
			defer func() { _ = recover() }() // debug/elf's own panics are not ours
			ef, _, _ = newELF(data)
		}()
		if ef == nil {
			return
		}
		parseDebugLink(ef, data)
		raw, err := parseDebugFile(data, debugCandidate{link: true}, "", debugLink{crc: crc32.ChecksumIEEE(data)})
		if err != nil {
			return
		}
		tab := functionTable(raw)
		for _, e := range tab.entries[:min(len(tab.entries), 16)] {
			tab.lookup(e.addr)
		}
	})
}
