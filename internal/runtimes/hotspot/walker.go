package hotspot

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WalkerLayout is what bpf/hotspot.h needs of one JVM build beyond Layout:
// where a blob keeps its frame set-up length and the interpreter's code
// is, and where an interpreted frame saves its caller's stack pointer.
type WalkerLayout struct {
	// CodeBlob::_frame_complete_offset, an int16 from JDK 23 on.
	BlobFrameComplete   uint64
	FrameComplete16     bool
	InterpreterCodeAddr uint64 // AbstractInterpreter::_code (StubQueue*), static
	// StubQueue::_stub_buffer (its first byte) and _buffer_limit (int).
	StubBuffer, StubBufferLimit uint64
	SpaceHighBoundary           uint64 // VirtualSpace::_high_boundary
	// An interpreted frame's slots, in words from its frame pointer (rbp,
	// x29): the caller's sp (frame::interpreter_frame_sender_sp_offset),
	// the Method* and the bytecode pointer.
	FrameSenderSP, FrameMethod, FrameBCP int64
}

// interpreterSlots are an interpreted frame's slots by machine, in words
// from its frame pointer, the same in JDK 11 to 25: the caller's sp and
// the last sp (which x86-64's VMStructs publishes, frame::
// interpreter_frame_sender_sp_offset and _last_sp_offset; arm64's
// publishes neither: read from OpenJDK 17.0.21 for arm64, Debian's, under
// qemu-aarch64), then, below the last sp, the Method* and the bytecode
// pointer: frame_x86.hpp has method, mirror, mdp, cache, locals, bcp;
// frame_aarch64.hpp method, mdp, a padding word (the extended sp from JDK
// 22), mirror, cache, locals, bcp.
var interpreterSlots = map[elf.Machine]struct{ senderSP, lastSP, method, bcp int64 }{
	elf.EM_X86_64:  {senderSP: -1, lastSP: -2, method: -1, bcp: -6},
	elf.EM_AARCH64: {senderSP: -1, lastSP: -2, method: -1, bcp: -7},
}

// NewWalkerLayout derives the WalkerLayout of vm's JVM, a libjvm of
// machine, or names every missing part.
func NewWalkerLayout(vm *VMStructs, machine elf.Machine) (*WalkerLayout, error) {
	var missing []string
	field := func(typ, name string, static bool) Field {
		f, ok := vm.FieldOf(typ, name)
		if !ok || f.Static != static || (static && f.Address == 0) {
			missing = append(missing, typ+"::"+name)
		}
		return f
	}
	complete := field("CodeBlob", "_frame_complete_offset", false)
	w := &WalkerLayout{
		BlobFrameComplete:   complete.Offset,
		FrameComplete16:     complete.Type == "int16_t",
		InterpreterCodeAddr: field("AbstractInterpreter", "_code", true).Address,
		StubBuffer:          field("StubQueue", "_stub_buffer", false).Offset,
		StubBufferLimit:     field("StubQueue", "_buffer_limit", false).Offset,
		SpaceHighBoundary:   field("VirtualSpace", "_high_boundary", false).Offset,
	}
	slots, ok := interpreterSlots[machine]
	if !ok {
		return nil, fmt.Errorf("no interpreter frame layout for %v", machine)
	}
	// What the JVM publishes, else the machine's layout; x86-64's JVMs
	// publish both (a JVM that does not is not one the table knows).
	published := func(name string, known int64) int64 {
		if v, ok := vm.Ints[name]; ok {
			return v
		}
		if machine == elf.EM_X86_64 {
			missing = append(missing, name)
		}
		return known
	}
	w.FrameSenderSP = published("frame::interpreter_frame_sender_sp_offset", slots.senderSP)
	lastSP := published("frame::interpreter_frame_last_sp_offset", slots.lastSP)
	w.FrameMethod, w.FrameBCP = lastSP+slots.method, lastSP+slots.bcp
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrIncomplete, strings.Join(missing, ", "))
	}
	return w, nil
}

// maxWalkerHeaps is HOTSPOT_MAX_HEAPS of bpf/hotspot.h.
const maxWalkerHeaps = 4

// walkerHeap and walkerProc are struct hotspot_heap and struct
// hotspot_proc of bpf/hotspot.h (bpf.CpuHotspotProc).
type walkerHeap struct {
	Low, High, Segmap uint64
	Log2Segment       uint32
	Reserved          uint32
}

type walkerProc struct {
	Heaps                                                   [maxWalkerHeaps]walkerHeap
	InterpLow, InterpHigh                                   uint64
	HeapsN                                                  uint32
	BlockHeader, BlobFrameSize, BlobFrameComplete, BlobCode uint16
	InterpSenderSP, InterpMethod, InterpBCP                 int16
	MethodConst, ConstMethodSize                            uint16
	FrameComplete16, CodeIsOffset                           uint8
}

// maxInterpreterSize bounds the template interpreter's code (a few
// hundred KiB in every JDK).
const maxInterpreterSize = 16 << 20

// WalkerProc reads what the walker needs of the JVM whose memory is mem
// and returns it as its hotspot_procs entry: the reserved bounds of each
// code heap (so heaps that grow need no update), their segment maps, the
// interpreter's code and the offsets of this build (a libjvm of machine).
func WalkerProc(mem io.ReaderAt, addr func(symbol string) (uint64, bool), machine elf.Machine) ([]byte, error) {
	vm, err := Read(mem, addr)
	if err != nil {
		return nil, err
	}
	l, err := NewLayout(vm)
	if err != nil {
		return nil, err
	}
	wl, err := NewWalkerLayout(vm, machine)
	if err != nil {
		return nil, err
	}
	cc, err := ReadCodeCache(mem, l)
	if err != nil {
		return nil, err
	}
	r := &memReader{mem: mem}
	p := walkerProc{
		BlockHeader:       uint16(l.BlockHeaderSize),
		BlobFrameSize:     uint16(l.BlobFrameSize),
		BlobFrameComplete: uint16(wl.BlobFrameComplete),
		BlobCode:          uint16(l.BlobCode),
		InterpSenderSP:    int16(wl.FrameSenderSP),
		InterpMethod:      int16(wl.FrameMethod),
		InterpBCP:         int16(wl.FrameBCP),
		MethodConst:       uint16(l.MethodConst),
		ConstMethodSize:   uint16(l.ConstMethodSize),
	}
	for _, off := range []uint64{l.BlockHeaderSize, l.BlobFrameSize, wl.BlobFrameComplete, l.BlobCode, l.MethodConst, l.ConstMethodSize} {
		if off > 1024 {
			return nil, fmt.Errorf("implausible CodeBlob offset %d", off)
		}
	}
	for _, slot := range []int64{wl.FrameSenderSP, wl.FrameMethod, wl.FrameBCP} {
		if slot < -16 || slot >= 0 {
			return nil, fmt.Errorf("implausible interpreter frame slot %d", slot)
		}
	}
	if wl.FrameComplete16 {
		p.FrameComplete16 = 1
	}
	if l.BlobCodeIsOffset {
		p.CodeIsOffset = 1
	}
	heaps, err := heapsReserved(r, l, wl, cc)
	if err != nil {
		return nil, err
	}
	copy(p.Heaps[:], heaps)
	p.HeapsN = uint32(len(heaps))
	if p.InterpLow, p.InterpHigh, err = interpreterCode(r, wl); err != nil {
		return nil, err
	}
	return binary.Append(nil, binary.NativeEndian, &p)
}

// heapsReserved returns the heaps of cc up to their reserved end (they are
// committed as they fill), sorted, at most maxWalkerHeaps.
func heapsReserved(r *memReader, l *Layout, wl *WalkerLayout, cc *CodeCache) ([]walkerHeap, error) {
	if len(cc.Heaps) > maxWalkerHeaps {
		return nil, fmt.Errorf("%d code heaps, the walker knows at most %d", len(cc.Heaps), maxWalkerHeaps)
	}
	var out []walkerHeap
	for i, h := range cc.Heaps {
		high, err := r.u64(h.Addr + l.HeapMemory + wl.SpaceHighBoundary)
		if err != nil {
			return nil, fmt.Errorf("heap %d's reserved end: %w", i, err)
		}
		if high < h.High || high-h.Low > maxCodeSize {
			return nil, fmt.Errorf("heap %d: reserved end %#x, committed [%#x, %#x)", i, high, h.Low, h.High)
		}
		out = append(out, walkerHeap{Low: h.Low, High: high, Segmap: h.Segmap, Log2Segment: h.Log2Segment})
	}
	slices.SortFunc(out, func(a, b walkerHeap) int { return cmp.Compare(a.Low, b.Low) })
	for i := 1; i < len(out); i++ {
		if out[i].Low < out[i-1].High {
			return nil, fmt.Errorf("code heaps [%#x, %#x) and [%#x, %#x) overlap", out[i-1].Low, out[i-1].High, out[i].Low, out[i].High)
		}
	}
	return out, nil
}

// interpreterCode returns the bounds of the template interpreter's code.
func interpreterCode(r *memReader, wl *WalkerLayout) (low, high uint64, err error) {
	queue, err := r.u64(wl.InterpreterCodeAddr)
	if err != nil {
		return 0, 0, fmt.Errorf("the interpreter's code: %w", err)
	}
	if queue == 0 {
		return 0, 0, ErrNotInitialised
	}
	if low, err = r.u64(queue + wl.StubBuffer); err != nil {
		return 0, 0, fmt.Errorf("the interpreter's code: %w", err)
	}
	b, err := r.bytes(queue+wl.StubBufferLimit, 4)
	if err != nil {
		return 0, 0, fmt.Errorf("the interpreter's code: %w", err)
	}
	size := int32(binary.LittleEndian.Uint32(b))
	if low == 0 || size <= 0 || size > maxInterpreterSize || low > 1<<48 {
		return 0, 0, fmt.Errorf("the interpreter's code: %d bytes at %#x", size, low)
	}
	return low, low + uint64(size), nil
}

// codeRanges returns the code heaps' reserved ranges of a walker entry.
func codeRanges(value []byte) [][2]uint64 {
	var p walkerProc
	if _, err := binary.Decode(value, binary.NativeEndian, &p); err != nil {
		return nil
	}
	var out [][2]uint64
	for _, h := range p.Heaps[:min(p.HeapsN, maxWalkerHeaps)] {
		if h.Low < h.High {
			out = append(out, [2]uint64{h.Low, h.High})
		}
	}
	return out
}
