// Package cfi builds unwind tables from the DWARF call frame information
// (.eh_frame, .debug_frame) of an ELF file: for each address range, how to
// find the canonical frame address (CFA) and where the return address and the
// caller's frame pointer are saved. A stack walker that has no frame pointers
// to follow reads these tables instead. x86-64 and aarch64 files are
// supported; what a row's fields mean on each is said at Kind.
package cfi

import (
	"fmt"
	"iter"
	"sort"
)

// Kind says how a Row unwinds a frame.
//
// On aarch64 (DWARF registers x29, the frame pointer, 29; x30, the link
// register, 30; sp 31; the return address column is the CIE's, 30), only
// KindNoCFI, KindCFA, KindStop and KindUnsupported occur. KindCFA: CFA =
// CFAReg + CFAOffset, CFAReg RegSP (sp) or RegFP (x29); x29 is saved at
// CFA+FPOffset (0: not saved by this frame, it still holds the caller's);
// the return address is saved at CFA+RAOffset, or, RAOffset 0, not saved:
// it is still in x30 (a leaf function, or a pc before the prologue's store).
// Return addresses signed with pointer authentication
// (DW_CFA_AARCH64_negate_ra_state) change no row: the walker strips the
// signature. KindStop: x30 is undefined (_start, thread_start). The PLT,
// for which the linker writes no CFI, gets KindCFA rows of its own (CFA =
// sp, or sp+16 after the lazy PLT header's push; the return address in
// x30). A register saved in another register, an expression, a CFA on
// another register: KindUnsupported.
type Kind uint8

const (
	// KindNoCFI: no CFI covers the PC (a gap between FDEs, or before the
	// first); the walker may fall back to the frame pointer.
	KindNoCFI Kind = iota
	// KindCFA: CFA = CFAReg + CFAOffset; the return address is saved at
	// CFA+RAOffset (always CFA-8 on x86-64; aarch64: see above), the
	// caller's rbp at CFA+FPOffset (FPOffset 0: rbp is not saved by this
	// frame, it still holds the caller's value).
	KindCFA
	// KindPLT: a linker-generated lazy PLT entry (16 bytes each): CFA = rsp +
	// CFAOffset, plus 8 when (PC&15) >= PLTEdge (after the entry's push).
	// The return address is at CFA+RAOffset; rbp is untouched.
	KindPLT
	// KindSignal: a signal trampoline (glibc's __restore_rt): rsp points at
	// the kernel's signal frame; the interrupted frame's rsp, rip and rbp
	// are the words at rsp+CFAOffset, rsp+RAOffset and rsp+FPOffset.
	KindSignal
	// KindStop: the outermost frame (the return address is undefined, as in
	// _start or a new thread's start routine): the walk ends normally.
	KindStop
	// KindUnsupported: CFI the walker cannot follow (a CFA on another
	// register, an unknown expression, a register saved in a register, an
	// instruction not understood): the walk must stop here.
	KindUnsupported
	numKinds
)

var kindNames = [numKinds]string{"nocfi", "cfa", "plt", "signal", "stop", "unsupported"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Reg is a register a CFA is computed from.
type Reg uint8

const (
	RegNone Reg = iota
	RegSP       // stack pointer (rsp, sp)
	RegFP       // frame pointer (rbp, x29)
)

// Row says how to unwind a frame whose PC is in [PC, next row's PC). The
// meaning of the offsets depends on Kind (see there).
type Row struct {
	PC        uint64 // file virtual address, as in the ELF program headers
	Kind      Kind
	CFAReg    Reg
	PLTEdge   uint8 // KindPLT only
	CFAOffset int32
	FPOffset  int32
	RAOffset  int32
}

// sameRule reports whether a and b unwind the same way (their PCs aside).
func sameRule(a, b Row) bool {
	a.PC = b.PC
	return a == b
}

// Table is the unwind table of one ELF file: rows sorted by PC, no two
// adjacent rows alike, gaps between FDEs filled with KindNoCFI rows.
type Table struct {
	Rows  []Row
	Stats Stats
}

// Lookup returns the row covering pc (KindNoCFI before the first row).
func (t *Table) Lookup(pc uint64) Row {
	i := sort.Search(len(t.Rows), func(i int) bool { return t.Rows[i].PC > pc })
	if i == 0 {
		return Row{}
	}
	return t.Rows[i-1]
}

// SkipReason says why an FDE was left out of the table.
type SkipReason uint8

const (
	SkipMalformed      SkipReason = iota // unreadable entry, FDE header or CIE pointer
	SkipUnsupportedCIE                   // CIE version or augmentation not handled
	SkipEmpty                            // empty address range
	SkipOutsideText                      // range not inside an executable segment
	SkipOverlap                          // starts where an earlier FDE starts
	SkipCovered                          // .debug_frame FDE wholly covered by .eh_frame
	numSkipReasons
)

var skipNames = [numSkipReasons]string{"malformed", "unsupported_cie", "empty", "outside_text", "overlap", "covered"}

func (s SkipReason) String() string {
	if s < numSkipReasons {
		return skipNames[s]
	}
	return fmt.Sprintf("skip(%d)", uint8(s))
}

// Stats describes how a table was built, for telemetry.
type Stats struct {
	FDEs int // FDEs evaluated into rows
	// BadPrograms counts FDEs whose instructions stopped at something not
	// understood: from there to their end, rows are KindUnsupported.
	BadPrograms int
	Skipped     [numSkipReasons]int // FDEs left out, by SkipReason
	Rows        [numKinds]int       // table rows, by Kind
}

// span is the address range [start, end) of one FDE (or of the part of it
// that is used) and its rows, rows[lo:hi] of the builder's buffer.
type span struct {
	start, end    uint64
	chunk, lo, hi int32 // its FDE's rows (rowSink.rows)
}

// resolveOverlaps sorts spans by start and makes them disjoint: a span that
// starts inside another cuts it short (as a lookup by greatest start would),
// one that starts where another starts is dropped.
func resolveOverlaps(spans []span) (out []span, dropped int) {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out = spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s.start < out[n-1].end {
			if s.start == out[n-1].start {
				dropped++
				continue
			}
			out[n-1].end = s.start
		}
		out = append(out, s)
	}
	return out, dropped
}

// uncovered returns the parts of spans outside cover (both sorted and
// disjoint), and how many spans were wholly covered.
func uncovered(spans, cover []span) (out []span, covered int) {
	j := 0
	for _, s := range spans {
		for j < len(cover) && cover[j].end <= s.start {
			j++
		}
		n := len(out)
		cur := s.start
		for k := j; k < len(cover) && cover[k].start < s.end; k++ {
			if cover[k].start > cur {
				out = append(out, span{start: cur, end: cover[k].start, chunk: s.chunk, lo: s.lo, hi: s.hi})
			}
			cur = max(cur, cover[k].end)
		}
		if cur < s.end {
			out = append(out, span{start: cur, end: s.end, chunk: s.chunk, lo: s.lo, hi: s.hi})
		}
		if len(out) == n {
			covered++
		}
	}
	return out, covered
}

// walkLayout hands the rows of the spans (sorted, disjoint) to emit in
// order, each span's rows clipped to its range, KindNoCFI rows in the gaps
// and after the last; repeats not merged (Rows.All merges them).
func walkLayout(rows *rowSink, spans []span, emit func(Row)) {
	for i, s := range spans {
		if i > 0 && s.start > spans[i-1].end {
			emit(Row{PC: spans[i-1].end})
		}
		fde := rows.rows(s)
		// The row in force at s.start starts the span.
		j := sort.Search(len(fde), func(j int) bool { return fde[j].PC > s.start }) - 1
		for j = max(j, 0); j < len(fde) && fde[j].PC < s.end; j++ {
			r := fde[j]
			r.PC = max(r.PC, s.start)
			emit(r)
		}
	}
	if n := len(spans); n > 0 {
		emit(Row{PC: spans[n-1].end})
	}
}

// Rows are a file's unwind rows built but not laid out yet (BuildRows).
type Rows struct {
	sink  rowSink
	spans []span
	// Stats are the build's; its Rows counts are filled only in a Table.
	Stats Stats
}

// All yields the rows as Table.Rows holds them: by PC, alike neighbours
// merged, gaps between FDEs as KindNoCFI rows.
func (r *Rows) All() iter.Seq[Row] {
	return func(yield func(Row) bool) {
		var last Row
		n, stop := 0, false
		walkLayout(&r.sink, r.spans, func(row Row) {
			if stop || n > 0 && sameRule(last, row) {
				return
			}
			n++
			last = row
			stop = !yield(row)
		})
	}
}

// table lays the rows out in a Table, allocated once at its size (a first
// pass counts them).
func (r *Rows) table() *Table {
	n := 0
	for range r.All() {
		n++
	}
	t := &Table{Rows: make([]Row, 0, n), Stats: r.Stats}
	for row := range r.All() {
		t.Rows = append(t.Rows, row)
		t.Stats.Rows[row.Kind]++
	}
	return t
}
