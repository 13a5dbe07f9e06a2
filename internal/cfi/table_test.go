package cfi

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fdeSpec is one FDE of a test section: [start, start+size) and its program.
type fdeSpec struct {
	start, size uint64
	instr       []byte
}

func assemble(debug bool, fdes ...fdeSpec) *frameSection {
	a := frameAsm{addr: 0x400, debug: debug}
	c := a.cie("zR", stdCIE...)
	for _, f := range fdes {
		a.fde(c, f.start, f.size, f.instr...)
	}
	return a.section()
}

func TestLayout(t *testing.T) {
	push := cat(advance(1), defCFAOffset(16)) // one push at the first instruction
	tests := []struct {
		name    string
		eh, dbg []fdeSpec
		exec    []addrRange
		want    []Row
		skipped map[SkipReason]int
	}{{
		name: "adjacent identical rows of two FDEs merge, gaps get NoCFI rows",
		eh:   []fdeSpec{{0x1000, 0x10, nil}, {0x1010, 0x10, nil}, {0x1030, 0x10, push}},
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1020, KindNoCFI), cfaRow(0x1030, RegSP, 8, 0),
			cfaRow(0x1031, RegSP, 16, 0), kindRow(0x1040, KindNoCFI)},
	}, {
		name: "FDEs out of order are sorted",
		eh:   []fdeSpec{{0x2000, 0x10, push}, {0x1000, 0x10, push}},
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, 0), kindRow(0x1010, KindNoCFI),
			cfaRow(0x2000, RegSP, 8, 0), cfaRow(0x2001, RegSP, 16, 0), kindRow(0x2010, KindNoCFI)},
	}, {
		name:    "an FDE starting where another starts is dropped, one starting inside cuts it short",
		eh:      []fdeSpec{{0x1000, 0x20, push}, {0x1000, 0x10, nil}, {0x1010, 0x10, defCFAOffset(32)}},
		want:    []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, 0), cfaRow(0x1010, RegSP, 32, 0), kindRow(0x1020, KindNoCFI)},
		skipped: map[SkipReason]int{SkipOverlap: 1},
	}, {
		name: ".debug_frame fills the gaps of .eh_frame",
		eh:   []fdeSpec{{0x1000, 0x10, push}, {0x1020, 0x10, nil}},
		dbg: []fdeSpec{{0x1008, 0x10, cat(advance(4), defCFAOffset(48))}, {0x1020, 0x8, defCFAOffset(32)},
			{0x1028, 0x18, defCFAOffset(64)}},
		want: []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, 0), cfaRow(0x1010, RegSP, 48, 0),
			kindRow(0x1018, KindNoCFI), cfaRow(0x1020, RegSP, 8, 0), cfaRow(0x1030, RegSP, 64, 0), kindRow(0x1040, KindNoCFI)},
		skipped: map[SkipReason]int{SkipCovered: 1},
	}, {
		name:    "FDEs outside the executable segments and empty ones are skipped",
		eh:      []fdeSpec{{0, 0x10, nil}, {0x1000, 0x10, nil}, {0x1ff0, 0x20, nil}, {0x1100, 0, nil}},
		exec:    []addrRange{{0x1000, 0x2000}},
		want:    []Row{cfaRow(0x1000, RegSP, 8, 0), kindRow(0x1010, KindNoCFI)},
		skipped: map[SkipReason]int{SkipOutsideText: 2, SkipEmpty: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dbg *frameSection
			if tt.dbg != nil {
				dbg = assemble(true, tt.dbg...)
			}
			table, err := buildSections(sources{arch: archX86, eh: ehSource{sec: assemble(false, tt.eh...)}, dbg: dbg, exec: tt.exec})
			require.NoError(t, err)
			require.Equal(t, tt.want, table.Rows)
			checkInvariants(t, table)
			for r := range numSkipReasons {
				require.Equal(t, tt.skipped[r], table.Stats.Skipped[r], "skipped %v", r)
			}
			for k := range numKinds {
				n := 0
				for _, r := range table.Rows {
					if r.Kind == k {
						n++
					}
				}
				require.Equal(t, n, table.Stats.Rows[k], "rows of kind %v", k)
			}
		})
	}
}

// TestMalformed checks that broken entries are skipped and counted, and
// that what follows them is still read when their length is sound.
func TestMalformed(t *testing.T) {
	good := func(a *frameAsm, c int) { a.fde(c, 0x5000, 0x10) }
	tests := []struct {
		name    string
		build   func(a *frameAsm)
		skipped map[SkipReason]int
		fdes    int
	}{{
		name: "CIE version 2",
		build: func(a *frameAsm) {
			c := a.cie("zR", stdCIE...)
			a.buf[c+8] = 2
			a.fde(c, 0x1000, 0x10)
			good(a, a.cie("zR", stdCIE...))
		},
		skipped: map[SkipReason]int{SkipUnsupportedCIE: 1},
		fdes:    1,
	}, {
		name: "unknown augmentation",
		build: func(a *frameAsm) {
			a.fde(a.cie("zRX", stdCIE...), 0x1000, 0x10)
			good(a, a.cie("zR", stdCIE...))
		},
		skipped: map[SkipReason]int{SkipUnsupportedCIE: 1},
		fdes:    1,
	}, {
		name: "CIE pointer before the section and onto an FDE",
		build: func(a *frameAsm) {
			c := a.cie("zR", stdCIE...)
			f := a.fde(c, 0x1000, 0x10)
			binary.LittleEndian.PutUint32(a.buf[f+4:], 1<<20)
			f2 := a.fde(c, 0x2000, 0x10)
			binary.LittleEndian.PutUint32(a.buf[f2+4:], uint32(f2+4-f))
			good(a, c)
		},
		skipped: map[SkipReason]int{SkipMalformed: 2},
		fdes:    1,
	}, {
		name: "zero terminator in the middle is passed over",
		build: func(a *frameAsm) {
			c := a.cie("zR", stdCIE...)
			a.buf = append(a.buf, 0, 0, 0, 0)
			good(a, c)
		},
		fdes: 1,
	}, {
		name: "entry longer than the section ends the walk",
		build: func(a *frameAsm) {
			good(a, a.cie("zR", stdCIE...))
			a.buf = binary.LittleEndian.AppendUint32(a.buf, 100)
			a.buf = append(a.buf, 1, 2, 3)
		},
		skipped: map[SkipReason]int{SkipMalformed: 1},
		fdes:    1,
	}, {
		name: "FDE too short for its addresses",
		build: func(a *frameAsm) {
			c := a.cie("zR", stdCIE...)
			a.entry(binary.LittleEndian.AppendUint32(nil, uint32(len(a.buf)+4-c)))
			good(a, c)
		},
		skipped: map[SkipReason]int{SkipMalformed: 1},
		fdes:    1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := frameAsm{addr: 0x400}
			tt.build(&a)
			table, err := buildSections(sources{arch: archX86, eh: ehSource{sec: a.section()}})
			require.NoError(t, err)
			checkInvariants(t, table)
			require.Equal(t, tt.fdes, table.Stats.FDEs)
			for r := range numSkipReasons {
				require.Equal(t, tt.skipped[r], table.Stats.Skipped[r], "skipped %v", r)
			}
			require.Equal(t, KindCFA, table.Lookup(0x5000).Kind)
		})
	}
}

func TestIndexedFDEs(t *testing.T) {
	a := frameAsm{addr: 0x400}
	c := a.cie("zR", stdCIE...)
	f1 := a.fde(c, 0x1000, 0x10, cat(advance(1), defCFAOffset(16))...)
	f2 := a.fde(c, 0x2000, 0x10)
	// Duplicates, an offset inside f1 and the CIE's offset are all ignored.
	offsets := []int{f2, f1, f1, f1 + 3, c}
	table, err := buildSections(sources{arch: archX86, eh: ehSource{sec: a.section(), fdeOffsets: offsets}})
	require.NoError(t, err)
	require.Equal(t, []Row{cfaRow(0x1000, RegSP, 8, 0), cfaRow(0x1001, RegSP, 16, 0), kindRow(0x1010, KindNoCFI),
		cfaRow(0x2000, RegSP, 8, 0), kindRow(0x2010, KindNoCFI)}, table.Rows)
	require.Equal(t, 2, table.Stats.FDEs)
	require.Equal(t, 2, table.Stats.Skipped[SkipMalformed])
}

func TestRowLimit(t *testing.T) {
	var instr []byte
	for i := range 200 {
		instr = append(instr, cat(advance(1), defCFAOffset(uint64(8+8*(i%2))))...)
	}
	b := &builder{arch: archX86, sink: rowSink{max: 100}}
	b.cies = map[int]cieResult{}
	sec := assemble(false, fdeSpec{0x1000, 0x1000, instr})
	require.ErrorIs(t, b.parseAll(sec, false), ErrTooManyRows)
}

// FDEs whose rows straddle the sink's chunks, one of them longer than a
// chunk, come out whole and in order, as with one array.
func TestRowsAcrossChunks(t *testing.T) {
	a := frameAsm{addr: 0x400}
	c := a.cie("zR", stdCIE...)
	fdeRows := []int{rowChunk / 3, rowChunk / 3, rowChunk / 3, rowChunk + 5, 7, rowChunk / 2, rowChunk / 2}
	var want []Row
	start := uint64(0x10000)
	for _, n := range fdeRows {
		// Row 0 is the CIE's CFA = rsp+8; each advance alternates 16, 8.
		// A rule that goes on from one FDE to the next is one row.
		var instr []byte
		want = appendRow(want, cfaRow(start, RegSP, 8, 0))
		for i := 1; i < n; i++ {
			off := uint64(8 + 8*(i%2))
			instr = append(instr, cat(advance(1), defCFAOffset(off))...)
			want = append(want, cfaRow(start+uint64(i), RegSP, int32(off), 0))
		}
		a.fde(c, start, uint64(n)+1, instr...)
		start += uint64(n) + 1
	}
	want = append(want, kindRow(start, KindNoCFI))
	table, err := buildSections(sources{arch: archX86, eh: ehSource{sec: a.section()}})
	require.NoError(t, err)
	for i := range min(len(want), len(table.Rows)) {
		require.Equal(t, want[i], table.Rows[i], "row %d", i)
	}
	require.Equal(t, len(want), len(table.Rows))
	require.Greater(t, len(want), 3*rowChunk, "rows in more than three chunks")
}

// Rows.All yields what Build's table holds, for the system's own C library
// and loader.
func TestRowsAllIsTheTable(t *testing.T) {
	files, _ := filepath.Glob("/lib/*-linux-gnu/libc.so.6")
	more, _ := filepath.Glob("/lib/*-linux-gnu/ld-linux-*.so.*")
	files = append(files, more...)
	if len(files) == 0 {
		t.Skip("no glibc here")
	}
	for _, path := range files {
		f, err := elf.Open(path)
		require.NoError(t, err)
		table, err := Build(f)
		require.NoError(t, err)
		rows, err := BuildRows(f)
		require.NoError(t, err)
		f.Close()
		assert.Equal(t, table.Rows, slices.Collect(rows.All()), path)
		assert.Greater(t, len(table.Rows), 1000, path)
	}
}

// appendRow appends r unless it repeats the rule of the last row, as a
// table merges them.
func appendRow(rows []Row, r Row) []Row {
	if n := len(rows); n > 0 && sameRule(rows[n-1], r) {
		return rows
	}
	return append(rows, r)
}
