//go:build linux

package unwinder

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A CPython process gets its interpreter's entry in the Python map, with
// the address of _PyRuntime the process itself gives (ctypes), also when
// its files' unwind tables do not fit (rows for 16 rows only), and loses it
// when forgotten.
func TestLoaderPython(t *testing.T) {
	in := testutil.Interpreters(t)[0]
	cmd := exec.Command(in.Path, "-c", `
import ctypes, sys
print(ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")), flush=True)
sys.stdin.read()
`)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	c := testutil.StartChild(t, cmd)
	t.Cleanup(func() { _ = stdin.Close(); _ = c.Wait(t, testutil.Patient(time.Minute)) })
	line := c.Line(t, testutil.Patient(time.Minute))
	want, err := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
	require.NoError(t, err, line)

	pid := uint32(c.Pid())
	cpython := capture.CPython.Name()
	for _, rows := range []uint64{1 << 20, 16} {
		maps := newTestMaps(t, maxTables)
		l := NewLoader(maps, procfs.FS{Root: "/proc"}, rows)
		require.NoError(t, l.Load(pid))
		var got bpf.CpuPythonProc
		require.NoError(t, maps.Runtimes[cpython].Lookup(&pid, &got), "rows %d", rows)
		assert.Equal(t, want, got.Runtime, "rows %d: _PyRuntime", rows)
		assert.NotZero(t, got.ThreadId)
		assert.Equal(t, uint64(1), l.Stats().Runtimes[cpython].Processes)
		assert.Equal(t, map[string]uint64{fmt.Sprintf("3.%d", in.Minor()): 1}, l.Stats().Runtimes[cpython].Versions)
		l.Forget(pid)
		assert.ErrorIs(t, maps.Runtimes[cpython].Lookup(&pid, &got), ebpf.ErrKeyNotExist)
		assert.Zero(t, l.Stats().Runtimes[cpython].Processes)
		assert.Empty(t, l.Stats().Runtimes[cpython].Versions)
	}

	// The interpreter's entry is in before any table is built.
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	build := l.build
	builds := 0
	l.build = func(f *elf.File) ([]bpf.CpuUnwindRow, uint64, error) {
		if builds++; builds == 1 {
			var got bpf.CpuPythonProc
			assert.NoError(t, maps.Runtimes[cpython].Lookup(&pid, &got), "the entry when the first table is built")
		}
		return build(f)
	}
	require.NoError(t, l.Load(pid))
	require.NotZero(t, builds)
	l.Forget(pid)
}

// A CPython interpreter the walker refuses (here: _Py_DebugOffsets without
// their cookie) is counted, and why is taken once.
func TestLoaderCountsRefusedInterpreters(t *testing.T) {
	src := "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0"
	data, err := os.ReadFile(src)
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name != "_PyRuntime" {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				data[p.Off+s.Value-p.Vaddr] = 'y' // the cookie's first byte
			}
		}
	}
	broken, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)

	l := NewLoader(newTestMaps(t, maxTables), procfs.FS{Root: "/proc"}, 1<<20)
	cpython := capture.CPython.Name()
	for range 2 {
		require.Nil(t, l.detectRuntime(broken))
	}
	require.Equal(t, uint64(2), l.Stats().Runtimes[cpython].Unsupported)
	errs := l.takeUnsupportedErrors(cpython)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "xdebugpy")
	require.Nil(t, l.detectRuntime(broken))
	require.Empty(t, l.takeUnsupportedErrors(cpython), "a reason already taken")
}
