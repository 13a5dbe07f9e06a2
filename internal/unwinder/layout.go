// Package unwinder loads unwind tables (internal/cfi) and the executable
// mappings of processes into the BPF maps the CPU sampler walks user stacks
// with (bpf/unwind.h): the rows of every file in one array, each file's
// rows contiguous, and an LPM trie from (pid, address) to the mapping's
// table. Tables are built once per file, shared by every process mapping
// it, and dropped when no process maps it any more.
package unwinder

import (
	"debug/elf"
	"errors"
	"math"
	"math/bits"
	"slices"
)

// Row kinds of bpf/unwind.h (enum unwind_kind).
const (
	kindNoCFI       = 0
	kindCFA         = 1
	kindPLT         = 2
	kindSignal      = 3
	kindStop        = 4
	kindUnsupported = 5
)

// DWARF x86-64 register numbers of the CFA bases the walk knows.
const (
	regFP = 6
	regSP = 7
)

// keyBits are the bits of an unwind_mapping_key after its prefixlen: the
// 32-bit pid, then the 64-bit big-endian address.
const keyBits = 96

// maxSearchRows is the longest table the BPF binary search covers
// (UNWIND_SEARCH_STEPS halvings).
const maxSearchRows = 1 << 22

// block is a power-of-two sized, aligned address range: an LPM prefix.
type block struct {
	addr uint64
	bits int // log2 of the size
}

// blocks splits [start, end) into the fewest aligned power-of-two blocks,
// in address order (at most two per bit of the range's size).
func blocks(start, end uint64) []block {
	var out []block
	for start < end {
		k := 63
		if start != 0 {
			k = min(k, bits.TrailingZeros64(start))
		}
		for k > 0 && end-start < uint64(1)<<k {
			k--
		}
		out = append(out, block{addr: start, bits: k})
		start += uint64(1) << k
	}
	return out
}

// prefixLen is the LPM prefix length of b for one pid.
func (b block) prefixLen() uint32 { return uint32(keyBits - b.bits) }

// loadBias returns the difference between addresses in a mapping of f and
// the file's virtual addresses: vaddr = addr - bias. start and offset are
// the mapping's first address and file offset.
func loadBias(progs []elf.ProgHeader, start, offset uint64) (uint64, error) {
	for _, p := range progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		// The mapping starts at the page of the segment holding offset.
		pageOff := p.Off &^ (pageSize - 1)
		if offset < pageOff || offset >= p.Off+p.Filesz {
			continue
		}
		return start - offset + p.Off - p.Vaddr, nil
	}
	return 0, errors.New("no executable segment at the mapping's offset")
}

const pageSize = 4096

// span is a range of rows in the rows array.
type span struct {
	first, n uint32
}

// rowSpace hands out ranges of the rows array, first fit.
type rowSpace struct {
	free []span // sorted by first, never adjacent
	used uint64
}

func newRowSpace(capacity uint32) *rowSpace {
	return &rowSpace{free: []span{{0, capacity}}}
}

// alloc returns the first row of a free range of n rows.
func (s *rowSpace) alloc(n uint32) (uint32, bool) {
	if n == 0 {
		return 0, false
	}
	for i, f := range s.free {
		if f.n < n {
			continue
		}
		if f.n == n {
			s.free = slices.Delete(s.free, i, i+1)
		} else {
			s.free[i] = span{f.first + n, f.n - n}
		}
		s.used += uint64(n)
		return f.first, true
	}
	return 0, false
}

// release gives back n rows from first, merging with free neighbours.
func (s *rowSpace) release(first, n uint32) {
	if n == 0 {
		return
	}
	s.used -= uint64(n)
	i, _ := slices.BinarySearchFunc(s.free, first, func(f span, v uint32) int {
		switch {
		case f.first < v:
			return -1
		case f.first > v:
			return 1
		}
		return 0
	})
	s.free = slices.Insert(s.free, i, span{first, n})
	if i+1 < len(s.free) && s.free[i].first+s.free[i].n == s.free[i+1].first {
		s.free[i].n += s.free[i+1].n
		s.free = slices.Delete(s.free, i+1, i+2)
	}
	if i > 0 && s.free[i-1].first+s.free[i-1].n == s.free[i].first {
		s.free[i-1].n += s.free[i].n
		s.free = slices.Delete(s.free, i, i+1)
	}
}

// fitsInt16 says whether an offset fits a row's int16 field.
func fitsInt16(v int64) bool { return v >= math.MinInt16 && v <= math.MaxInt16 }
