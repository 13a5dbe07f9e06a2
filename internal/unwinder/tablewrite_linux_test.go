//go:build linux

package unwinder

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A table's rows read back from the kernel as they were written, whether
// copied in through mappings of its memory (across window boundaries, to
// its last row) or written by updates.
func TestAddTableWritesEveryRow(t *testing.T) {
	testutil.RequireBPF(t)
	const n = 2*mappedWindow/RowBytes + 12345 // three windows, the last partial
	rows := make([]bpf.CpuUnwindRow, n)
	for i := range rows {
		rows[i] = bpf.CpuUnwindRow{Pc: uint32(i) * 3, Rule: uint32(i) ^ 0x5a5a5a5a}
	}
	for _, tc := range []struct {
		name   string
		mapped bool
	}{{"mapped", true}, {"updates", false}} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := bpf.LoadCpu()
			require.NoError(t, err)
			fs := spec.Maps[bpf.CpuMapUnwindFiles].Copy()
			fs.MaxEntries = 4
			if tc.mapped {
				fs.InnerMap.Flags |= unix.BPF_F_MMAPABLE
			}
			files, err := ebpf.NewMap(fs)
			require.NoError(t, err, "this kernel (5.10 and later) takes mappable tables")
			defer files.Close()
			l := &Loader{maps: Maps{Files: files, Table: fs.InnerMap, MappedTables: tc.mapped}}
			require.NoError(t, l.addTable(2, rows))

			var id ebpf.MapID
			require.NoError(t, files.Lookup(uint32(2), &id))
			table, err := ebpf.NewMapFromID(id)
			require.NoError(t, err)
			defer table.Close()
			require.Equal(t, uint32(n), table.MaxEntries())
			for _, i := range []uint32{0, 1, mappedWindow/RowBytes - 1, mappedWindow / RowBytes, 2 * mappedWindow / RowBytes, n - 1} {
				var got bpf.CpuUnwindRow
				require.NoError(t, table.Lookup(i, &got))
				require.Equal(t, rows[i], got, "row %d", i)
			}
		})
	}
}
