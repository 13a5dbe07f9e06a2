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
	"math/bits"
)

// Row kinds of bpf/unwind.h (enum unwind_kind).
const (
	kindNoCFI       uint32 = 0
	kindCFA         uint32 = 1
	kindPLT         uint32 = 2
	kindSignal      uint32 = 3
	kindStop        uint32 = 4
	kindUnsupported uint32 = 5
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
