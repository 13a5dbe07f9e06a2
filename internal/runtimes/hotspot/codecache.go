package hotspot

import (
	"encoding/binary"
	"fmt"
	"io"
)

// CodeHeap is one heap of a JVM's code cache (non-nmethods, profiled and
// non-profiled nmethods by default): its code in [Low, High), and its
// segment map, one byte per 2^Log2Segment bytes of code, at Segmap.
type CodeHeap struct {
	Low, High   uint64
	Segmap      uint64
	Log2Segment uint32
	Addr        uint64 // the CodeHeap object
}

// CodeCache is where a JVM's generated code lives.
type CodeCache struct {
	Low, High uint64 // the bounds of every heap
	Heaps     []CodeHeap
}

// Bounds on what ReadCodeCache and its users accept.
const (
	maxHeaps    = 8
	maxCodeSize = 1 << 32 // bytes of one heap (the default reserve is 240 MiB)
)

// ReadCodeCache reads the code cache of the JVM with layout l.
func ReadCodeCache(mem io.ReaderAt, l *Layout) (*CodeCache, error) {
	r := &memReader{mem: mem}
	var cc CodeCache
	var err error
	if cc.Low, err = r.u64(l.LowBoundAddr); err != nil {
		return nil, fmt.Errorf("the code cache's low bound: %w", err)
	}
	if cc.High, err = r.u64(l.HighBoundAddr); err != nil {
		return nil, fmt.Errorf("the code cache's high bound: %w", err)
	}
	// Bounds left at zero (seen on JDK 25): the heaps' make them.
	derive := cc.Low == 0 && cc.High == 0
	if !derive && (cc.Low >= cc.High || cc.High-cc.Low > maxHeaps*maxCodeSize) {
		return nil, fmt.Errorf("code cache bounds [%#x, %#x)", cc.Low, cc.High)
	}
	heaps, err := r.u64(l.HeapsAddr)
	if err != nil {
		return nil, fmt.Errorf("the code heaps: %w", err)
	}
	b, err := r.bytes(heaps+l.ArrayLen, 4)
	if err != nil {
		return nil, fmt.Errorf("heaps' length: %w", err)
	}
	n := int32(binary.LittleEndian.Uint32(b))
	if n < 1 || n > maxHeaps {
		return nil, fmt.Errorf("%d code heaps", n)
	}
	data, err := r.u64(heaps + l.ArrayData)
	if err != nil {
		return nil, fmt.Errorf("heaps' array: %w", err)
	}
	for i := range uint64(n) {
		h, err := r.u64(data + 8*i)
		if err != nil {
			return nil, fmt.Errorf("heap %d: %w", i, err)
		}
		heap, err := readHeap(r, l, h)
		if err != nil {
			return nil, fmt.Errorf("heap %d: %w", i, err)
		}
		if !derive && (heap.Low < cc.Low || heap.High > cc.High) {
			return nil, fmt.Errorf("heap %d [%#x, %#x) outside the code cache", i, heap.Low, heap.High)
		}
		cc.Heaps = append(cc.Heaps, heap)
	}
	if derive {
		cc.Low, cc.High = cc.Heaps[0].Low, cc.Heaps[0].High
		for _, h := range cc.Heaps[1:] {
			cc.Low, cc.High = min(cc.Low, h.Low), max(cc.High, h.High)
		}
	}
	return &cc, nil
}

func readHeap(r *memReader, l *Layout, h uint64) (CodeHeap, error) {
	heap := CodeHeap{Addr: h}
	var err error
	for _, f := range []struct {
		dst  *uint64
		addr uint64
	}{{&heap.Low, h + l.HeapMemory + l.SpaceLow}, {&heap.High, h + l.HeapMemory + l.SpaceHigh}, {&heap.Segmap, h + l.HeapSegmap + l.SpaceLow}} {
		if *f.dst, err = r.u64(f.addr); err != nil {
			return heap, err
		}
	}
	b, err := r.bytes(h+l.HeapLog2Segment, 4)
	if err != nil {
		return heap, err
	}
	heap.Log2Segment = binary.LittleEndian.Uint32(b)
	if heap.Low > heap.High || heap.High-heap.Low > maxCodeSize || heap.Log2Segment < 4 || heap.Log2Segment > 16 {
		return heap, fmt.Errorf("implausible heap [%#x, %#x), segments of 2^%d bytes", heap.Low, heap.High, heap.Log2Segment)
	}
	return heap, nil
}

// Contains says whether pc is in the heap's code.
func (h CodeHeap) Contains(pc uint64) bool { return pc >= h.Low && pc < h.High }

// Heap returns the heap holding pc.
func (cc *CodeCache) Heap(pc uint64) (CodeHeap, bool) {
	for _, h := range cc.Heaps {
		if h.Contains(pc) {
			return h, true
		}
	}
	return CodeHeap{}, false
}

// segmapFree marks a segment of no block in a segment map.
const segmapFree = 0xff

// maxSegmapHops bounds the walk back to a block's first segment: each
// hop goes back at most 254 segments, and the map is kept so few are needed.
const maxSegmapHops = 64

// BlobAt returns the address of the CodeBlob holding pc in heap h: the
// segment map leads back from pc's segment to its block's first one (each
// byte tells how many segments back to go; 0 at the first), the blob
// follows the block's header.
func BlobAt(mem io.ReaderAt, l *Layout, h CodeHeap, pc uint64) (uint64, error) {
	if !h.Contains(pc) {
		return 0, fmt.Errorf("pc %#x not in heap [%#x, %#x)", pc, h.Low, h.High)
	}
	r := &memReader{mem: mem}
	seg := (pc - h.Low) >> h.Log2Segment
	for range maxSegmapHops {
		b, err := r.bytes(h.Segmap+seg, 1)
		if err != nil {
			return 0, fmt.Errorf("segment map: %w", err)
		}
		switch {
		case b[0] == segmapFree:
			return 0, fmt.Errorf("pc %#x in no block", pc)
		case b[0] == 0:
			return h.Low + seg<<h.Log2Segment + l.BlockHeaderSize, nil
		case uint64(b[0]) > seg:
			return 0, fmt.Errorf("segment map leads before the heap at pc %#x", pc)
		}
		seg -= uint64(b[0])
	}
	return 0, fmt.Errorf("no block start within %d hops of pc %#x", maxSegmapHops, pc)
}
