//go:build linux

package unwinder

import (
	"debug/elf"
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
		l.Forget(pid)
		assert.ErrorIs(t, maps.Runtimes[cpython].Lookup(&pid, &got), ebpf.ErrKeyNotExist)
		assert.Zero(t, l.Stats().Runtimes[cpython].Processes)
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
