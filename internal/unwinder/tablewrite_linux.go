//go:build linux

package unwinder

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
)

// A row is RowBytes in Go as in the kernel's array (whose elements are
// 8-byte aligned), so rows are copied into a mapped table as they are.
var (
	_ [RowBytes - unsafe.Sizeof(bpf.CpuUnwindRow{})]struct{}
	_ [unsafe.Sizeof(bpf.CpuUnwindRow{}) - RowBytes]struct{}
	_ [-(RowBytes % 8)]struct{} // an element's stride is its size
)

// mappedWindow is how much of a table is mapped into this process at a
// time while its rows are copied in: its pages count in the resident set
// while mapped.
const mappedWindow = 1 << 20

// addTable creates a table holding rows and puts it in slot: written
// through a mapping of its memory where tables are mappable (Linux 5.5),
// else in batches where the kernel has batch updates of arrays (5.6), else
// one by one, before any walk can see it. The array of tables keeps it
// alive.
func (l *Loader) addTable(slot uint32, rows []bpf.CpuUnwindRow) error {
	spec := l.maps.Table.Copy()
	spec.MaxEntries = uint32(len(rows))
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("create a table of %d rows: %w", len(rows), memlock.Explain(err))
	}
	defer m.Close()
	if l.maps.MappedTables {
		err = writeMapped(m, rows)
	} else {
		err = writeUpdates(m, rows)
	}
	if err != nil {
		return err
	}
	if err := l.maps.Files.Put(slot, m); err != nil {
		return fmt.Errorf("put table in slot %d: %w", slot, err)
	}
	return nil
}

// writeMapped copies rows into table m, created BPF_F_MMAPABLE, through
// windows of its memory mapped in turn: one copy, not the kernel's work per
// row of an update.
func writeMapped(m *ebpf.Map, rows []bpf.CpuUnwindRow) error {
	if len(rows) == 0 {
		return nil
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(rows))), len(rows)*RowBytes)
	page := os.Getpagesize()
	for off := 0; off < len(src); off += mappedWindow {
		n := min(mappedWindow, len(src)-off)
		mem, err := unix.Mmap(m.FD(), int64(off), (n+page-1)&^(page-1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("map unwind rows at byte %d: %w", off, err)
		}
		copy(mem, src[off:off+n])
		if err := unix.Munmap(mem); err != nil {
			return fmt.Errorf("unmap unwind rows at byte %d: %w", off, err)
		}
	}
	return nil
}

// writeUpdates writes rows into table m by map updates.
func writeUpdates(m *ebpf.Map, rows []bpf.CpuUnwindRow) error {
	keys := make([]uint32, len(rows))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(keys, rows, nil); errors.Is(err, ebpf.ErrNotSupported) {
		for i := range rows {
			if err := m.Put(keys[i], &rows[i]); err != nil {
				return fmt.Errorf("write unwind row %d: %w", i, err)
			}
		}
	} else if err != nil {
		return fmt.Errorf("write unwind rows: %w", err)
	}
	return nil
}
