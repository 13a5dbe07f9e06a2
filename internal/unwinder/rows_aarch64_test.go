package unwinder

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestBuildRowsARM64 packs the tables of Debian's arm64 files in the arm64
// layout: at every row of the table, the kernel's row must read back (as
// bpf/unwind.h's ROW_* macros read it) as the table's row, or be
// unsupported where the layout cannot hold it.
func TestBuildRowsARM64(t *testing.T) {
	for _, file := range []struct{ pkg, path string }{
		{"libc6", "lib/aarch64-linux-gnu/libc.so.6"},
		{"xz-utils", "usr/bin/xz"},
		{"libpython3.11", "usr/lib/aarch64-linux-gnu/libpython3.11.so.1.0"},
	} {
		t.Run(filepath.Base(file.path), func(t *testing.T) {
			f, err := elf.Open(filepath.Join(testutil.DebianPackage(t, "arm64", file.pkg), file.path))
			require.NoError(t, err)
			defer f.Close()
			table, err := cfi.Build(f)
			require.NoError(t, err)
			if hostMachine != elf.EM_AARCH64 {
				_, _, err := buildRows(f)
				require.ErrorContains(t, err, "no table", "another machine's file gets no table")
			}
			rows, base, err := kernelRows(f.Machine, slices.Values(table.Rows))
			require.NoError(t, err)
			require.NotEmpty(t, rows)

			var stats packingStats
			for _, r := range table.Rows {
				stats.add(r)
				i := sort.Search(len(rows), func(i int) bool { return uint64(rows[i].Pc)+base > r.PC }) - 1
				require.GreaterOrEqual(t, i, 0)
				want := r
				want.PC = 0
				if r.Kind == cfi.KindCFA && kernelRowARM64(r).Rule == kindUnsupported {
					want = cfi.Row{Kind: cfi.KindUnsupported}
				}
				require.Equal(t, want, unpackARM64(rows[i].Rule), "row at %#x", r.PC)
			}
			t.Logf("%s: %d rows, %d in the kernel's layout; %s", file.path, len(table.Rows), len(rows), &stats)
		})
	}
}

// unpackARM64 reads a rule as bpf/unwind.h does on arm64.
func unpackARM64(rule uint32) cfi.Row {
	r := cfi.Row{Kind: cfi.Kind(rule & 7)}
	if r.Kind != cfi.KindCFA {
		return r
	}
	r.CFAReg = cfi.RegSP
	if rule&ruleCFAOnFP != 0 {
		r.CFAReg = cfi.RegFP
	}
	switch int32(rule<<20) >> 24 {
	case arm64RecordAtBase:
		r.CFAOffset = int32(rule) >> 12 * arm64CFAUnit
		r.FPOffset = -r.CFAOffset
		r.RAOffset = r.FPOffset + 8
		return r
	case arm64LRAtBase:
		r.CFAOffset = int32(rule) >> 12 * arm64CFAUnit
		r.RAOffset = -r.CFAOffset
		return r
	}
	r.FPOffset = int32(rule<<20) >> 24 * 8
	r.RAOffset = int32(rule<<12) >> 24 * 8
	r.CFAOffset = int32(rule) >> 20 * arm64CFAUnit
	return r
}

// packingStats counts a table's rows by kind, its CFA rows the arm64 layout
// cannot hold by reason, and the largest distances from the CFA.
type packingStats struct {
	kinds                [cfi.KindUnsupported + 1]int
	cfaRows, raInLR      int
	badCFA, badFP, badRA int
	maxCFA, maxFP, maxRA int32 // magnitudes, in bytes
}

func (p *packingStats) add(r cfi.Row) {
	p.kinds[r.Kind]++
	if r.Kind != cfi.KindCFA {
		return
	}
	p.cfaRows++
	if r.RAOffset == 0 {
		p.raInLR++
	}
	if atBaseMark(r.FPOffset, r.RAOffset, r.CFAOffset) != 0 {
		if _, ok := units(r.CFAOffset, arm64CFAUnit, -arm64MaxRecordCFAOffset-1, arm64MaxRecordCFAOffset); !ok {
			p.badCFA++
		}
	} else {
		if _, ok := units(r.CFAOffset, arm64CFAUnit, -arm64MaxCFAOffset-1, arm64MaxCFAOffset); !ok {
			p.badCFA++
		}
		if _, ok := units(r.FPOffset, 8, -arm64MaxSlot+1, arm64MaxSlot); !ok {
			p.badFP++
		}
		if _, ok := units(r.RAOffset, 8, -arm64MaxSlot, arm64MaxSlot); !ok {
			p.badRA++
		}
	}
	p.maxCFA = max(p.maxCFA, r.CFAOffset, -r.CFAOffset)
	p.maxFP = max(p.maxFP, r.FPOffset, -r.FPOffset)
	p.maxRA = max(p.maxRA, r.RAOffset, -r.RAOffset)
}

func (p *packingStats) String() string {
	total := 0
	for _, n := range p.kinds {
		total += n
	}
	s := "rows by kind:"
	for k, n := range p.kinds {
		if n > 0 {
			s += fmt.Sprintf(" %v=%d (%.1f%%)", cfi.Kind(k), n, 100*float64(n)/float64(total))
		}
	}
	return s + fmt.Sprintf("; of %d CFA rows, %d with the return address in x30; unsupported in the layout: "+
		"CFA offset %d, x29 slot %d, x30 slot %d; largest |CFA offset| %d, |x29 slot| %d, |x30 slot| %d bytes",
		p.cfaRows, p.raInLR, p.badCFA, p.badFP, p.badRA, p.maxCFA, p.maxFP, p.maxRA)
}
