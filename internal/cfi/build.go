package cfi

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
)

// Bounds on hostile input: ELF files come from profiled processes.
const (
	maxSectionSize = 64 << 20 // bytes of .eh_frame, .eh_frame_hdr or .debug_frame
	maxRows        = 1 << 22  // rows of one table
)

// Build reads the CFI of an x86-64 or aarch64 ELF file (executable or
// shared library) and returns its unwind table. Where .eh_frame and
// .debug_frame both cover a PC, .eh_frame wins. In a file without section
// headers, .eh_frame is found through the PT_GNU_EH_FRAME segment
// (.eh_frame_hdr). On aarch64, the PLT (which has no CFI) gets rows of its
// own. A file without CFI gets an empty table; malformed entries are
// skipped and counted in the table's Stats.
func Build(f *elf.File) (*Table, error) {
	rows, err := BuildRows(f)
	if err != nil {
		return nil, err
	}
	return rows.table(), nil
}

// BuildRows is Build without the table's own copy of the rows: Rows.All
// hands them out in order (a file of millions of rows is then held once,
// and the caller keeps them in its own form).
func BuildRows(f *elf.File) (*Rows, error) {
	a := archOf(f.Machine)
	if f.Class != elf.ELFCLASS64 || a == nil {
		return nil, fmt.Errorf("cfi: %v %v: only x86-64 and aarch64 are supported", f.Class, f.Machine)
	}
	eh, err := ehFrame(f)
	if err != nil {
		return nil, fmt.Errorf("cfi: .eh_frame: %w", err)
	}
	src := sources{arch: a, eh: eh, exec: executableRanges(f), stubs: pltStubs(f, a.stubs)}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := readSection(s)
		if err != nil {
			return nil, fmt.Errorf("cfi: .debug_frame: %w", err)
		}
		src.dbg = &frameSection{data: data, debug: true}
	}
	return parseSections(src)
}

// sources are what a table is built from.
type sources struct {
	arch  *arch
	eh    ehSource
	dbg   *frameSection // nil: no .debug_frame
	exec  []addrRange   // FDEs outside are skipped (nil: none is)
	stubs []stub        // code without CFI, where no FDE covers it
}

// buildSections builds the table of src.
func buildSections(src sources) (*Table, error) {
	rows, err := parseSections(src)
	if err != nil {
		return nil, err
	}
	return rows.table(), nil
}

// parseSections turns the FDEs of src into rows, not laid out yet.
func parseSections(src sources) (*Rows, error) {
	b := &builder{arch: src.arch, sink: rowSink{max: maxRows}, exec: src.exec}
	if eh := src.eh; eh.sec != nil {
		var err error
		if eh.fdeOffsets != nil {
			err = b.parseIndexed(eh.sec, eh.fdeOffsets)
		} else {
			err = b.parseAll(eh.sec, eh.fromSegment)
		}
		if err != nil {
			return nil, fmt.Errorf("cfi: .eh_frame: %w", err)
		}
	}
	b.ehSpans, b.spans = b.spans, nil
	if src.dbg != nil {
		if err := b.parseAll(src.dbg, false); err != nil {
			return nil, fmt.Errorf("cfi: .debug_frame: %w", err)
		}
	}
	if err := b.addStubs(src.stubs); err != nil {
		return nil, fmt.Errorf("cfi: PLT: %w", err)
	}
	// The sections' bytes can go before the rows are laid out.
	src.eh.sec, src.dbg, b.cies = nil, nil, nil
	return b.finish(), nil
}

// builder turns the FDEs of one file into spans of rows.
type builder struct {
	arch      *arch
	sink      rowSink
	spans     []span // of the section being parsed
	ehSpans   []span // of .eh_frame, once parsed
	stubSpans []span // of stubs
	exec      []addrRange
	stats     Stats
	cies      map[int]cieResult
	stack     []ruleSet // DW_CFA_remember_state's, reused from FDE to FDE
	prog      program   // the FDE's being run
	// cieBudget bounds the bytes of CIEs parsed per section, so that FDEs
	// pointing at many overlapping CIEs cannot make the work quadratic.
	cieBudget int
}

type cieResult struct {
	c   *cie
	err error
}

type addrRange struct{ lo, hi uint64 }

// parseAll walks every entry of s. At a zero terminator it stops when
// stopAtEnd (data that runs on past .eh_frame), else continues as readelf.
func (b *builder) parseAll(s *frameSection, stopAtEnd bool) error {
	b.resetCIEs(s)
	b.spans = slices.Grow(b.spans, countEntries(s, stopAtEnd))
	for off := 0; off < len(s.data); {
		e, next, err := s.entryAt(off)
		switch {
		case errors.Is(err, errTerminator):
			if stopAtEnd {
				return nil
			}
			off = next
			continue
		case errors.Is(err, errTruncated):
			b.stats.Skipped[SkipMalformed]++
			return nil
		}
		if err == nil && e.isCIE {
			off = next
			continue
		}
		if err := b.addFDE(s, e, err); err != nil {
			return err
		}
		off = next
	}
	return nil
}

// countEntries counts the entries parseAll walks (CIEs too), reading their
// lengths only: the spans are allocated once (growing them by appends left
// 20 MB of garbage for node's 372k rows).
func countEntries(s *frameSection, stopAtEnd bool) int {
	n := 0
	for off := 0; off < len(s.data); n++ {
		_, next, err := s.entryAt(off)
		if errors.Is(err, errTruncated) || errors.Is(err, errTerminator) && stopAtEnd {
			break
		}
		off = next
	}
	return n
}

// parseIndexed parses the FDEs at the given offsets of s (from the
// .eh_frame_hdr search table), each once, skipping any that starts inside
// the previous one.
func (b *builder) parseIndexed(s *frameSection, offsets []int) error {
	b.resetCIEs(s)
	slices.Sort(offsets)
	b.spans = slices.Grow(b.spans, len(offsets))
	end := 0
	for i, off := range offsets {
		if i > 0 && off < end {
			if off != offsets[i-1] {
				b.stats.Skipped[SkipMalformed]++
			}
			continue
		}
		e, next, err := s.entryAt(off)
		if err == nil && e.isCIE {
			err = errors.New("CIE where an FDE was expected")
		}
		if errors.Is(err, errTerminator) || errors.Is(err, errTruncated) {
			b.stats.Skipped[SkipMalformed]++
			continue
		}
		end = next
		if err := b.addFDE(s, e, err); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) resetCIEs(s *frameSection) {
	b.cies = map[int]cieResult{}
	b.cieBudget = len(s.data)
}

// addFDE evaluates one FDE into a span (entryErr: the entry was unreadable).
// Only ErrTooManyRows is returned; other problems are counted.
func (b *builder) addFDE(s *frameSection, e entry, entryErr error) error {
	if entryErr != nil {
		b.stats.Skipped[SkipMalformed]++
		return nil
	}
	c, err := b.cieAt(s, e.cieOff)
	if err != nil {
		if errors.Is(err, errUnsupported) {
			b.stats.Skipped[SkipUnsupportedCIE]++
		} else {
			b.stats.Skipped[SkipMalformed]++
		}
		return nil
	}
	h, err := parseFDE(s, e, c)
	switch {
	case err != nil:
		b.stats.Skipped[SkipMalformed]++
		return nil
	case h.start == h.end:
		b.stats.Skipped[SkipEmpty]++
		return nil
	case !b.executable(h.start, h.end):
		b.stats.Skipped[SkipOutsideText]++
		return nil
	}
	b.sink.startFDE()
	// One program for every FDE: a new one per FDE escaped to the heap
	// (22 MB of garbage for node's 372k rows).
	b.prog = program{a: b.arch, c: c, rules: c.initial, loc: h.start, end: h.end, out: &b.sink, stack: b.stack[:0]}
	p := &b.prog
	if c.initialErr != nil {
		err = errors.Join(c.initialErr, p.add(Row{PC: h.start, Kind: KindUnsupported}))
	} else {
		err = p.run(h.instr, s.addr)
	}
	b.stack = p.stack[:0] // the next FDE's
	if errors.Is(err, ErrTooManyRows) {
		return fmt.Errorf("%w: more than %d", ErrTooManyRows, b.sink.max)
	}
	if err != nil {
		b.stats.BadPrograms++
	}
	b.stats.FDEs++
	chunk, lo, hi := b.sink.fdeRows()
	b.spans = append(b.spans, span{start: h.start, end: h.end, chunk: chunk, lo: lo, hi: hi})
	return nil
}

// addStubs adds the rows of the stubs within the executable ranges.
func (b *builder) addStubs(stubs []stub) error {
	for _, st := range stubs {
		if st.start >= st.end || !b.executable(st.start, st.end) {
			continue
		}
		b.sink.startFDE()
		for _, r := range st.rows {
			if err := b.sink.add(r); err != nil {
				return fmt.Errorf("%w: more than %d", err, b.sink.max)
			}
		}
		chunk, lo, hi := b.sink.fdeRows()
		b.stubSpans = append(b.stubSpans, span{start: st.start, end: st.end, chunk: chunk, lo: lo, hi: hi})
	}
	return nil
}

// cieAt parses (once) the CIE at section offset off.
func (b *builder) cieAt(s *frameSection, off int) (*cie, error) {
	if res, ok := b.cies[off]; ok {
		return res.c, res.err
	}
	var c *cie
	e, next, err := s.entryAt(off)
	switch {
	case err != nil:
	case !e.isCIE:
		err = errCIEPointer
	case next-off > b.cieBudget:
		err = errors.New("CIE budget spent")
	default:
		b.cieBudget -= next - off
		c, err = parseCIE(b.arch, s, e)
	}
	if errors.Is(err, errTerminator) {
		err = errCIEPointer
	}
	b.cies[off] = cieResult{c: c, err: err}
	return c, err
}

func (b *builder) executable(start, end uint64) bool {
	if b.exec == nil {
		return true
	}
	for _, r := range b.exec {
		if start >= r.lo && end <= r.hi {
			return true
		}
	}
	return false
}

// finish lays the spans out: .eh_frame first, .debug_frame in its gaps,
// stubs in what is left.
func (b *builder) finish() *Rows {
	eh, dropped := resolveOverlaps(b.ehSpans)
	dbg, dropped2 := resolveOverlaps(b.spans)
	dbg, covered := uncovered(dbg, eh)
	b.stats.Skipped[SkipOverlap] += dropped + dropped2
	b.stats.Skipped[SkipCovered] += covered
	all := append(eh, dbg...)
	byStart := func(x, y span) int { return cmp.Compare(x.start, y.start) }
	slices.SortFunc(all, byStart)
	if len(b.stubSpans) > 0 {
		stubs, _ := resolveOverlaps(b.stubSpans)
		stubs, _ = uncovered(stubs, all)
		all = append(all, stubs...)
		slices.SortFunc(all, byStart)
	}
	return &Rows{sink: b.sink, spans: all, Stats: b.stats}
}
