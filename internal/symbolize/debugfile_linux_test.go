//go:build linux

package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

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

// Opening a debug file that never answers (the debug directory on FUSE or
// a dead NFS server) costs the deadline once for the process, not once per
// stripped file and candidate.
func TestDebugFileStuckOpenBounded(t *testing.T) {
	const n = 4
	var maps string
	files := map[string][]byte{}
	for i := range n {
		// Stripped, each with its own build id: its own debug file path.
		lib, err := buildDynLib(t, "gnu", "-s", fmt.Sprintf("-Wl,--build-id=0x%040x", i+1))
		if err != nil {
			t.Skipf("cannot build a shared library: %v", err)
		}
		p := fmt.Sprintf("/lib/libdyn%d.so", i)
		maps += fmt.Sprintf("7f00%02x000000-7f00%02x100000 r-xp 00000000 fd:01 %d %s\n", i, i, 77+i, p)
		files[p] = lib
	}
	fs := fakeProcess(t, pid, maps, "/usr/bin/app", files)
	s, _ := observed(fs)
	s.deadline = procfs.NewDeadline(100*time.Millisecond, 16)
	release := make(chan struct{})
	defer close(release)
	var opens atomic.Int32
	s.openInRoot = func(uint32, string) (*os.File, error) {
		opens.Add(1)
		<-release
		return nil, errors.New("released")
	}
	t0 := time.Now()
	for i := range n {
		f := lookupWithin(t, s, pid, 0x7f0000000000+uint64(i)<<24+0x1000, 2*time.Second)
		require.NotNil(t, f.Mapping, "mapping %d", i)
		assert.Empty(t, f.Function)
	}
	assert.Less(t, time.Since(t0), 500*time.Millisecond, "%d stripped files, one deadline", n)
	assert.EqualValues(t, 1, opens.Load(), "no debug file is looked for after a stuck open")
	assert.Equal(t, map[string]uint64{procfs.ReasonTimeout: 1}, s.Stats().FilesRefused)
}
