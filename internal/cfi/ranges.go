package cfi

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
)

// Range is the code one FDE describes: [Start, End), link-time addresses.
type Range struct{ Start, End uint64 }

// FunctionRanges returns the code ranges of the FDEs of f's .eh_frame,
// sorted by start: the functions of the file, and the parts of a function
// the compiler placed apart from it (each has an FDE of its own), named or
// not. Malformed entries are left out.
func FunctionRanges(f *elf.File) (ranges []Range, err error) {
	defer recoverELF(&err)
	a := archOf(f.Machine)
	if f.Class != elf.ELFCLASS64 || a == nil {
		return nil, fmt.Errorf("cfi: %v %v: only x86-64 and aarch64 are supported", f.Class, f.Machine)
	}
	eh, err := ehFrame(f)
	if err != nil || eh.sec == nil {
		return nil, err
	}
	b := &builder{arch: a}
	b.resetCIEs(eh.sec)
	add := func(e entry) {
		if e.isCIE {
			return
		}
		c, err := b.cieAt(eh.sec, e.cieOff)
		if err != nil {
			return
		}
		if h, err := parseFDE(eh.sec, e, c); err == nil && h.end > h.start && len(ranges) < maxRows {
			ranges = append(ranges, Range{h.start, h.end})
		}
	}
	if eh.fdeOffsets != nil {
		for _, off := range eh.fdeOffsets {
			if e, _, err := eh.sec.entryAt(off); err == nil {
				add(e)
			}
		}
	} else {
		for off := 0; off < len(eh.sec.data); {
			e, next, err := eh.sec.entryAt(off)
			if errors.Is(err, errTruncated) || errors.Is(err, errTerminator) && eh.fromSegment || next <= off {
				break
			}
			if err == nil {
				add(e)
			}
			off = next
		}
	}
	slices.SortFunc(ranges, func(x, y Range) int { return cmp.Compare(x.Start, y.Start) })
	return slices.CompactFunc(ranges, func(x, y Range) bool { return x.Start == y.Start }), nil
}
