//go:build linux

package unwinder

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// libc is glibc as processes map it (usrmerge: /lib is a link to /usr/lib).
const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// newTestMaps creates maps shaped like the sampler's, with room for slots
// tables.
func newTestMaps(t *testing.T, slots uint32) Maps {
	t.Helper()
	testutil.RequireBPF(t)
	spec, err := bpf.LoadCpu()
	require.NoError(t, err)
	rs := spec.Maps[bpf.CpuMapUnwindFiles].Copy()
	rs.MaxEntries = slots
	ms := spec.Maps[bpf.CpuMapUnwindMappings].Copy()
	ms.MaxEntries = 4096
	r, err := ebpf.NewMap(rs)
	require.NoError(t, err)
	m, err := ebpf.NewMap(ms)
	require.NoError(t, err)
	py, err := ebpf.NewMap(spec.Maps[bpf.CpuMapPythonProcs].Copy())
	require.NoError(t, err)
	us := spec.Maps[bpf.CpuMapUnwindTableUsed].Copy()
	us.MaxEntries = slots
	u, err := ebpf.NewMap(us)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); m.Close(); py.Close(); u.Close() })
	return Maps{Files: r, Table: rs.InnerMap, Mappings: m, Used: u, Runtimes: map[string]*ebpf.Map{capture.CPython.Name(): py}}
}

// lookup does what bpf/unwind.h does for one address: the mapping, then
// the row.
func lookup(t *testing.T, maps Maps, pid uint32, addr uint64) (bpf.CpuUnwindMapping, *bpf.CpuUnwindRow, bool) {
	t.Helper()
	var m bpf.CpuUnwindMapping
	key := bpf.CpuUnwindMappingKey{Prefixlen: keyBits, Pid: pid, Addr: bigEndian(addr)}
	if err := maps.Mappings.Lookup(&key, &m); err != nil {
		return m, nil, false
	}
	if m.Rows == 0 {
		return m, nil, true
	}
	pc := uint32(addr - m.Bias)
	var id ebpf.MapID
	require.NoError(t, maps.Files.Lookup(m.Table, &id))
	rows, err := ebpf.NewMapFromID(id)
	require.NoError(t, err)
	defer rows.Close()
	lo, hi := uint32(0), m.Rows
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		var r bpf.CpuUnwindRow
		require.NoError(t, rows.Lookup(mid, &r))
		if r.Pc <= pc {
			lo = mid
		} else {
			hi = mid
		}
	}
	var r bpf.CpuUnwindRow
	require.NoError(t, rows.Lookup(lo, &r))
	return m, &r, true
}

// The rows the kernel would find for addresses of libc in this process are
// the CFI table's rows at the same file addresses; a mapping added later
// (as by dlopen) is loaded by Rescan, which the kernel asks for when a walk
// finds an address in no known mapping; Forget removes everything.
func TestLoaderMatchesTheTable(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	cmd := testutil.StartWorkload(t, testutil.BuildC(t, "nofp.c"), "60")
	pid := uint32(cmd.Process.Pid)
	require.Eventually(t, func() bool { // the dynamic loader has mapped libc
		b, _ := os.ReadFile(procfs.FS{Root: "/proc"}.Path(pid, "maps"))
		return strings.Contains(string(b), libc)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Load(pid))
	st := l.Stats()
	t.Logf("loaded: %+v", st)
	require.NotZero(t, st.Tables)

	f, err := elf.Open(libc)
	require.NoError(t, err)
	defer f.Close()
	table, err := cfi.Build(f)
	require.NoError(t, err)

	all, err := procfs.FS{Root: "/proc"}.Maps(pid)
	require.NoError(t, err)
	checked := 0
	for _, m := range all {
		if !m.Executable() || m.Path != libc {
			continue
		}
		bias, err := loadBias(progHeaders(f), m.Start, m.Offset)
		require.NoError(t, err)
		for addr := m.Start; addr < m.End; addr += 997 {
			km, kr, ok := lookup(t, maps, pid, addr)
			require.True(t, ok, "no mapping at %#x", addr)
			require.NotZero(t, km.Rows)
			want := kernelRow(table.Lookup(addr - bias))
			want.Pc = kr.Pc
			require.Equal(t, want, *kr, "row at %#x (vaddr %#x)", addr, addr-bias)
			checked++
		}
	}
	require.Greater(t, checked, 100, "addresses of libc checked")

	l.Forget(pid)
	st = l.Stats()
	assert.Equal(t, st.Tables, st.IdleTables, "no process maps a file any more: every table is idle")

	// libc's code mapped again, later, as dlopen maps a library.
	pid = uint32(os.Getpid())
	require.NoError(t, l.Load(pid))
	st = l.Stats()
	var text elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p.ProgHeader
			break
		}
	}
	fd, err := unix.Open(libc, unix.O_RDONLY, 0)
	require.NoError(t, err)
	mem, err := unix.Mmap(fd, int64(text.Off), 1<<20, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	unix.Close(fd)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(mem) }()
	addr := uint64(uintptr(unsafePointer(mem))) + 0x3000
	_, _, ok := lookup(t, maps, pid, addr)
	assert.False(t, ok, "the new mapping is not loaded before Rescan")
	l.Sweep()
	_, _, ok = lookup(t, maps, pid, addr)
	assert.False(t, ok, "Sweep reads no process")
	changed, err := l.Rescan(pid)
	require.NoError(t, err)
	assert.True(t, changed)
	km, kr, ok := lookup(t, maps, pid, addr)
	require.True(t, ok, "Rescan loads a mapping added since")
	changed, err = l.Rescan(pid)
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, uint64(2), l.Stats().Rescans)
	assert.Equal(t, uint64(1), l.Stats().Reloads, "the second Rescan found the mappings unchanged")
	require.NotZero(t, km.Rows)
	want := kernelRow(table.Lookup(addr - uint64(uintptr(unsafePointer(mem))) + text.Vaddr))
	want.Pc = kr.Pc
	assert.Equal(t, want, *kr)
	assert.LessOrEqual(t, l.Stats().Tables, st.Tables+1, "a file's table is built once: before %+v, after %+v", st, l.Stats())

	l.Forget(pid)
	_, _, ok = lookup(t, maps, pid, addr)
	assert.False(t, ok, "Forget removes the process's mappings")
	expireIdle(t, l)
	var key bpf.CpuUnwindMappingKey
	assert.ErrorIs(t, maps.Mappings.NextKey(nil, &key), ebpf.ErrKeyNotExist, "the trie is empty")
}

// Prune, run when announcements were lost, forgets the processes that
// exited and keeps the live ones.
func TestLoaderPrune(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	c := testutil.StartWorkloadChild(t, testutil.BuildC(t, "nofp.c"), "60")
	require.Eventually(t, func() bool { return l.Load(uint32(c.Pid())) == nil && l.Stats().Tables > 0 },
		5*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Load(uint32(os.Getpid())))
	require.Equal(t, uint64(2), l.Stats().Processes)
	l.Prune()
	assert.Equal(t, uint64(2), l.Stats().Processes, "both live")
	require.NoError(t, c.Kill(testutil.Patient(30*time.Second)))
	l.Prune()
	assert.Equal(t, uint64(1), l.Stats().Processes, "the killed workload is forgotten")
	l.Forget(uint32(os.Getpid()))
	expireIdle(t, l)
}

// expireIdle checks that every table left is idle, and expires them.
func expireIdle(t *testing.T, l *Loader) {
	t.Helper()
	st := l.Stats()
	assert.Equal(t, st.Tables, st.IdleTables, "tables no process maps are idle")
	l.mu.Lock()
	l.expireIdle(time.Now().Add(idleTableTTL))
	l.mu.Unlock()
	assert.Zero(t, l.Stats().Tables, "idle tables expire")
}

// A table that does not fit, or one of more rows than a table holds,
// leaves the file to frame pointers, counted under its reason and noted
// once for the log.
func TestLoaderTableRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity uint64
		build    func(*elf.File) ([]bpf.CpuUnwindRow, uint64, error)
		reason   capture.TableFailure
		says     string
	}{
		{"space full", 16, nil, capture.TableSpaceFull, "unwinding::table_memory_mib"},
		{"too many rows", 1 << 20, func(*elf.File) ([]bpf.CpuUnwindRow, uint64, error) {
			return nil, 0, fmt.Errorf("cfi: .eh_frame: %w", cfi.ErrTooManyRows)
		}, capture.TableTooLarge, "too many rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLoader(newTestMaps(t, maxTables), procfs.FS{Root: "/proc"}, tc.capacity)
			if tc.build != nil {
				l.build = tc.build
			}
			require.NoError(t, l.Load(uint32(os.Getpid())))
			l.RunBuilds()
			st := l.Stats()
			assert.NotZero(t, st.Failed[tc.reason], "stats %+v", st)
			assert.Zero(t, st.Tables)
			notes := l.TakeFailureNotes()
			var of []string
			for _, n := range notes {
				if strings.Contains(n, tc.reason.Reason()) {
					of = append(of, n)
				}
			}
			if assert.Len(t, of, 1, "notes %q", notes) {
				assert.Contains(t, of[0], tc.says)
			}
			assert.Empty(t, l.TakeFailureNotes(), "each note is taken once")
		})
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// Two copies of one binary (two inodes, one build id, as the same file in
// two container images) share one table, kept until neither runs.
func TestLoaderSharesTablesByBuildID(t *testing.T) {
	maps := newTestMaps(t, maxTables)
	l := NewLoader(maps, procfs.FS{Root: "/proc"}, 1<<20)
	bin := testutil.BuildC(t, "nofp.c")
	copied := filepath.Join(t.TempDir(), "nofp-copy")
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(copied, b, 0o755))

	var pids []uint32
	for _, path := range []string{bin, copied} {
		cmd := testutil.StartWorkload(t, path, "60")
		pid := uint32(cmd.Process.Pid)
		require.Eventually(t, func() bool { // the dynamic loader has mapped libc
			b, _ := os.ReadFile(procfs.FS{Root: "/proc"}.Path(pid, "maps"))
			return strings.Contains(string(b), libc)
		}, 5*time.Second, 10*time.Millisecond)
		pids = append(pids, pid)
	}
	require.NoError(t, l.Load(pids[0]))
	one := l.Stats()
	require.NoError(t, l.Load(pids[1]))
	two := l.Stats()
	t.Logf("one process: %+v; both: %+v", one, two)
	assert.Equal(t, one.Tables, two.Tables, "the copy's table is the original's")
	assert.Equal(t, one.RowsUsed, two.RowsUsed)

	slot := func(pid uint32, path string) uint32 {
		all, err := procfs.FS{Root: "/proc"}.Maps(pid)
		require.NoError(t, err)
		for _, m := range all {
			if m.Executable() && m.Path == path {
				km, _, ok := lookup(t, maps, pid, m.Start)
				require.True(t, ok)
				require.NotZero(t, km.Rows)
				return km.Table
			}
		}
		t.Fatalf("%s is not mapped by %d", path, pid)
		return 0
	}
	assert.Equal(t, slot(pids[0], bin), slot(pids[1], copied))

	l.Forget(pids[0])
	assert.Equal(t, two.Tables, l.Stats().Tables, "the copy still uses every table")
	_, _, ok := lookup(t, maps, pids[1], 0)
	assert.False(t, ok)
	slot(pids[1], copied)
	l.Forget(pids[1])
	expireIdle(t, l)
}

func TestNoPanic(t *testing.T) {
	require.NoError(t, noPanic(func() error { return nil }))
	require.ErrorContains(t, noPanic(func() error { panic("index out of range") }), "malformed file: index out of range")
}
