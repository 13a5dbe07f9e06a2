//go:build linux

package unwinder

import (
	"debug/elf"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/php"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

func TestJITRowPC(t *testing.T) {
	for _, c := range []struct {
		name  string
		progs []elf.ProgHeader
		want  uint64
	}{
		{"past the highest segment, a page apart", []elf.ProgHeader{
			{Type: elf.PT_LOAD, Vaddr: 0, Memsz: 0x1000},
			{Type: elf.PT_LOAD, Vaddr: 0x5000, Memsz: 0x2345},
			{Type: elf.PT_DYNAMIC, Vaddr: 0x9000, Memsz: 0x100},
		}, 0x9000},
		{"page-aligned end", []elf.ProgHeader{{Type: elf.PT_LOAD, Vaddr: 0x1000, Memsz: 0x1000}}, 0x3000},
	} {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, jitRowPC(c.progs)) })
	}
}

func TestJITFits(t *testing.T) {
	tab := &fileTable{base: 0x1000, jitPC: 0x10000}
	assert.True(t, jitFits(tab, 0x7f0000000000, 0x7f0000000000+64<<20))
	assert.False(t, jitFits(tab, 0, 1<<32-0xf000+1), "past 32 bits of pc")
	assert.True(t, jitFits(tab, 0, 1<<32-0xf000))
	assert.False(t, jitFits(&fileTable{base: 0x20000, jitPC: 0x10000}, 0, 1), "below the table")
}

// A PHP process with opcache's JIT: the executable piece of its JIT
// buffer points at the engine's table, and each of its addresses finds the
// row php.JITFrame gives (PHP 8.2's code keeps no frame pointer: the walk
// goes on through execute_ex's caller by this row alone).
func TestLoaderMapsJITBuffer(t *testing.T) {
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			maps := newTestMaps(t, maxTables)
			l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<22)
			cmd := testutil.StartPHP(t, p, p.Args(true, "tracing"), "60")
			pid := uint32(cmd.Process.Pid)
			require.NoError(t, l.Load(pid))
			// While the JIT compiles, its buffer is writable, not executable
			// (and not loaded): a walk there asks a rescan, as here.
			var ms []procfs.Map
			require.Eventually(t, func() bool {
				_, err := l.Rescan(pid)
				require.NoError(t, err)
				ms, err = procfs.FS{Root: "/proc"}.Maps(pid)
				require.NoError(t, err)
				bufs := php.JITBuffers(ms)
				for _, b := range bufs {
					if _, _, ok := lookup(t, maps, pid, b.Start); !ok {
						return false
					}
				}
				return len(bufs) > 0
			}, 10*time.Second, 100*time.Millisecond, "JIT buffer of %s loaded", p.Path)
			bufs := php.JITBuffers(ms)

			f, err := elf.Open(p.Path)
			require.NoError(t, err)
			defer f.Close()
			rows, err := cfi.BuildRows(f)
			require.NoError(t, err)
			row, err := php.JITFrame(f, rows.All())
			require.NoError(t, err)
			want := kernelRowOf(f.Machine)(row).Rule

			for _, b := range bufs {
				for _, addr := range []uint64{b.Start, b.Start + (b.End-b.Start)/2, b.End - 1} {
					m, r, ok := lookup(t, maps, pid, addr)
					require.True(t, ok, "%#x in no mapping", addr)
					require.NotZero(t, m.Rows, "%#x: no table", addr)
					require.NotNil(t, r)
					assert.Equal(t, want, r.Rule, "%#x", addr)
				}
			}
			// Beside it, the engine's own code keeps its rows.
			real, err := filepath.EvalSymlinks(p.Path)
			require.NoError(t, err)
			exe := firstMapping(ms, real)
			require.NotNil(t, exe)
			m, r, ok := lookup(t, maps, pid, exe.Start+(exe.End-exe.Start)/2)
			require.True(t, ok)
			require.NotZero(t, m.Rows)
			assert.NotEqual(t, bpf.CpuUnwindRow{Pc: r.Pc, Rule: want}, *r)
			assert.Zero(t, l.Stats().Failed[capture.TableNoJITRow])
		})
	}
}

// firstMapping returns the first executable mapping of path in ms.
func firstMapping(ms []procfs.Map, path string) *procfs.Map {
	for i := range ms {
		if ms[i].Path == path && ms[i].Executable() {
			return &ms[i]
		}
	}
	return nil
}
