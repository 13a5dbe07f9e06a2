package ruby

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Bounds on what ReadIseq reads: the process is not trusted.
const (
	maxStringBytes = 1 << 10  // a label or path is cut to this many bytes
	maxIseqSize    = 1 << 20  // instructions (VALUEs) of one iseq: far more than any method compiles to
	maxInsnsInfo   = 64 << 10 // line table entries of one iseq
	iseqHeaderSize = 16 + 8   // rb_iseq_t up to body
	bodyHeaderSize = 160      // rb_iseq_constant_body up to insns_info.succ_index_table, both versions
	// The succinct table: IMMEDIATE_TABLE_SIZE positions ranked in 6
	// words, then blocks of 512 positions (rank, small block ranks, 8 words
	// of bits: 80 bytes).
	succImmediate = 54
	succImmWords  = succImmediate / 9
	succBlockSize = 80
)

// ErrNotIseq means the address does not hold an instruction sequence.
var ErrNotIseq = errors.New("not an instruction sequence")

// Iseq is what naming needs of one instruction sequence.
type Iseq struct {
	Label, Path string
	FirstLine   int
	Size        int // instructions, in VALUEs
	Encoded     uint64

	lines []int32 // line_no of each insns_info entry
	succ  []byte  // succinct table (imm words, blocks), nil when len(lines) < 2
}

// ReadIseq reads the iseq at addr from mem (a process's memory). Reads are
// bounded: label and path at most 1 KiB, at most 64 Ki line entries.
func (l *Layout) ReadIseq(mem io.ReaderAt, addr uint64) (*Iseq, error) {
	h, err := runtimes.ReadMem(mem, addr, iseqHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("read iseq at %#x: %w", addr, err)
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tImemo || flags>>imemoShift&0xf != imemoIseq {
		return nil, fmt.Errorf("object at %#x: %w (flags %#x)", addr, ErrNotIseq, flags)
	}
	b, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(h[l.IseqBody:]), bodyHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("iseq at %#x: read body: %w", addr, err)
	}
	u32 := func(at uint32) uint32 { return binary.LittleEndian.Uint32(b[at:]) }
	u64 := func(at uint32) uint64 { return binary.LittleEndian.Uint64(b[at:]) }
	in := &Iseq{Size: int(u32(l.BodyIseqSize)), Encoded: u64(l.BodyIseqEncoded)}
	if in.Size <= 0 || in.Size > maxIseqSize {
		return nil, fmt.Errorf("iseq at %#x: %w: %d instructions", addr, ErrNotIseq, in.Size)
	}
	if l.FirstLineFixnum {
		in.FirstLine = int(int64(u64(l.BodyFirstLine)) >> 1)
	} else {
		in.FirstLine = int(int32(u32(l.BodyFirstLine)))
	}
	if in.Label, err = l.readString(mem, u64(l.BodyLabel)); err != nil {
		return nil, fmt.Errorf("iseq at %#x: label: %w", addr, err)
	}
	if in.Path, err = l.readPath(mem, u64(l.BodyPath)); err != nil {
		return nil, fmt.Errorf("iseq at %#x: path: %w", addr, err)
	}
	n := int(u32(l.BodyInsnsInfoSize))
	if n < 0 || n > min(in.Size, maxInsnsInfo) {
		return nil, fmt.Errorf("iseq at %#x: %w: %d line entries for %d instructions", addr, ErrNotIseq, n, in.Size)
	}
	if n == 0 {
		return in, nil
	}
	info, err := runtimes.ReadMem(mem, u64(l.BodyInsnsInfo), n*int(l.InsnInfoSize))
	if err != nil {
		return nil, fmt.Errorf("iseq at %#x: line entries: %w", addr, err)
	}
	in.lines = make([]int32, n)
	for i := range in.lines {
		in.lines[i] = int32(binary.LittleEndian.Uint32(info[i*int(l.InsnInfoSize):]))
	}
	if n > 1 {
		size := succImmWords * 8
		if in.Size < succImmediate {
			size = (in.Size + 8) / 9 * 8
		} else {
			size += (in.Size - succImmediate + 511) / 512 * succBlockSize
		}
		if in.succ, err = runtimes.ReadMem(mem, u64(l.BodyInsnsSuccTable), size); err != nil {
			return nil, fmt.Errorf("iseq at %#x: line positions: %w", addr, err)
		}
	}
	return in, nil
}

// Line is the line of the instruction before position (pc - iseq_encoded,
// in VALUEs: a frame's pc is past the instruction it runs), as Ruby's
// backtraces tell it; the first line when position is out of range or the
// table says nothing.
func (in *Iseq) Line(position uint32) int {
	if len(in.lines) == 0 || int64(position) > int64(in.Size) {
		return in.FirstLine
	}
	pos := int(position)
	if pos > 0 {
		pos--
	}
	if len(in.lines) == 1 {
		return int(in.lines[0])
	}
	i := in.rank(pos)
	if i < 1 || i > len(in.lines) {
		return in.FirstLine
	}
	return int(in.lines[i-1])
}

// rank is succ_index_lookup of iseq.c: how many entries of the line table
// start at or before pos.
func (in *Iseq) rank(pos int) int {
	word := func(at int) uint64 {
		if at < 0 || at+8 > len(in.succ) {
			return 0
		}
		return binary.LittleEndian.Uint64(in.succ[at:])
	}
	if pos < succImmediate {
		return int(word(pos/9*8) >> (pos % 9 * 7) & 0x7f)
	}
	block := succImmWords*8 + (pos-succImmediate)/512*succBlockSize
	bit := (pos - succImmediate) % 512
	small := bit / 64
	r := int(uint32(word(block)))
	if small > 0 {
		r += int(word(block+8) >> ((small - 1) * 9) & 0x1ff)
	}
	return r + bits.OnesCount64(word(block+16+small*8)<<(63-bit%64))
}

// readPath reads an iseq's pathobj: a String, or an Array [path, realpath].
func (l *Layout) readPath(mem io.ReaderAt, addr uint64) (string, error) {
	h, err := runtimes.ReadMem(mem, addr, int(l.ArrayHeapPtr)+8)
	if err != nil {
		return "", err
	}
	flags := binary.LittleEndian.Uint64(h)
	switch flags & tMask {
	case tString:
		return l.readString(mem, addr)
	case tArray:
		elem, err := l.arrayEntry(mem, addr, 0)
		if err != nil {
			return "", fmt.Errorf("path array: %w", err)
		}
		return l.readString(mem, elem)
	}
	return "", fmt.Errorf("path object of type %#x", flags&tMask)
}

// readString reads the String at addr, cut to maxStringBytes.
func (l *Layout) readString(mem io.ReaderAt, addr uint64) (string, error) {
	h, err := runtimes.ReadMem(mem, addr, int(l.StringPtr)+8)
	if err != nil {
		return "", err
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tString {
		return "", fmt.Errorf("not a String (flags %#x)", flags)
	}
	var n int64
	data := addr + uint64(l.StringEmbed)
	switch {
	case flags&flNoEmbed != 0:
		n = int64(binary.LittleEndian.Uint64(h[l.StringLen:]))
		data = binary.LittleEndian.Uint64(h[l.StringPtr:])
	case l.StringLenInHeader:
		n = int64(binary.LittleEndian.Uint64(h[l.StringLen:]))
	default:
		n = int64((flags & l.StringEmbedMask) >> l.StringEmbedShift)
	}
	if n < 0 {
		return "", fmt.Errorf("a String of length %d", n)
	}
	if n == 0 {
		return "", nil
	}
	b, err := runtimes.ReadMem(mem, data, int(min(n, maxStringBytes)))
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}
