package php

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// WalkedFrame is what the walk records of one PHP frame: the zend_function
// it runs (the frame's object), the op it is at (its position) and whether
// it ends a run of frames (the frame an execute_ex call was entered with).
//
// A file's or an eval's top code (Code: {main}, an include) is recorded by
// its file name instead: Function is the op_array's filename (a
// zend_string) and Position the op's line. That op_array is the request's
// own (opcache copies it into each request) and is often freed by the time
// the sample is named; the file name lives on.
type WalkedFrame struct {
	Function uint64
	Position uint32
	Entry    bool
	Code     bool
}

// NoPosition is the position of a frame with no op to be at: an internal
// (C) function's, or one whose opline is not in its function's ops.
const NoPosition = ^uint32(0)

// Walk walks the PHP frames of the process whose memory is mem and whose
// executor_globals is at executorGlobals (load bias added), the innermost
// first, at most max of them. It is the reference of the BPF walker
// (bpf/php.h): it reads what that reads, in the same order, and decides
// as it must.
//
// Per frame, from execute_data (EG(current_execute_data) first, then each
// prev_execute_data until NULL):
//   - read execute_data's opline, func, call info (This.u1.type_info) and
//     prev_execute_data: 56 bytes, one read;
//   - read func's type (u8) and, for user code (ZEND_USER_FUNCTION,
//     ZEND_EVAL_CODE), op_array.last and op_array.opcodes;
//   - position = (opline - opcodes) / sizeof(zend_op) when opline is an op
//     of the function (opcodes <= opline, aligned, index < last), else
//     NoPosition; internal functions have NoPosition;
//   - top code (the call info has ZEND_CALL_CODE) read by its file: read
//     op_array.filename; when not NULL, the frame is Code, Function that
//     address, and Position the line of the op at opline (zend_op.lineno,
//     read when the position is not NoPosition; unreadable: NoPosition);
//   - entry = the call info has ZEND_CALL_TOP and func is user code: the
//     frame an execute_ex call was entered with, which ends the run that
//     call runs. An internal function called by zend_call_function has
//     ZEND_CALL_TOP too but runs in no execute_ex: its frame belongs to the
//     run below it.
//
// A frame whose func cannot be read ends the walk with an error, the
// frames before it returned.
//
// The innermost frame's opline in memory is where its handlers last saved
// it, often stale (docs/php-layouts.md, "Live results"): the hybrid VM keeps
// the current one in a register (r15 on x86-64, x28 on arm64), which the
// BPF walker takes instead when the sampled pc is in execute_ex
// (Interpreter.ExecuteExStart, ExecuteExEnd; not JIT code, where no opline
// is current). Walk, reading memory only, cannot.
func (l *Layout) Walk(mem io.ReaderAt, executorGlobals uint64, max int) ([]WalkedFrame, error) {
	return l.walk(mem, executorGlobals, max, nil)
}

// walk is Walk, with the innermost frame's opline *innermost when not nil:
// what the BPF walker does when the pc is in execute_ex.
func (l *Layout) walk(mem io.ReaderAt, executorGlobals uint64, max int, innermost *uint64) ([]WalkedFrame, error) {
	b, err := runtimes.ReadMem(mem, executorGlobals+uint64(l.CurrentExecuteData), 8)
	if err != nil {
		return nil, fmt.Errorf("read current_execute_data: %w", err)
	}
	ex := binary.LittleEndian.Uint64(b)
	var frames []WalkedFrame
	for ex != 0 && len(frames) < max {
		e, err := runtimes.ReadMem(mem, ex, executeDataSize)
		if err != nil {
			return frames, fmt.Errorf("read execute_data at %#x: %w", ex, err)
		}
		opline := binary.LittleEndian.Uint64(e[l.ExecuteDataOpline:])
		fn := binary.LittleEndian.Uint64(e[l.ExecuteDataFunc:])
		callInfo := binary.LittleEndian.Uint32(e[l.ExecuteDataCallInfo:])
		ex = binary.LittleEndian.Uint64(e[l.ExecuteDataPrev:])
		if innermost != nil && len(frames) == 0 {
			opline = *innermost
		}
		t, err := runtimes.ReadMem(mem, fn+uint64(l.FunctionType), 1)
		if err != nil {
			return frames, fmt.Errorf("read function at %#x: %w", fn, err)
		}
		f := WalkedFrame{Function: fn, Position: NoPosition}
		if user := t[0] == userFunction || t[0] == evalCode; user {
			o, err := runtimes.ReadMem(mem, fn+uint64(l.OpArrayLast), 4)
			if err != nil {
				return frames, fmt.Errorf("read op_array at %#x: %w", fn, err)
			}
			p, err := runtimes.ReadMem(mem, fn+uint64(l.OpArrayOpcodes), 8)
			if err != nil {
				return frames, fmt.Errorf("read op_array at %#x: %w", fn, err)
			}
			f.Position = l.position(opline, binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(o))
			if callInfo&callCode != 0 {
				l.codeFrame(mem, fn, opline, &f)
			}
			f.Entry = callInfo&callTop != 0
		}
		frames = append(frames, f)
	}
	return frames, nil
}

// codeFrame makes f, the frame of the top code at fn, a Code frame (its
// file name and line) when the file name is readable.
func (l *Layout) codeFrame(mem io.ReaderAt, fn, opline uint64, f *WalkedFrame) {
	b, err := runtimes.ReadMem(mem, fn+uint64(l.OpArrayFilename), 8)
	if err != nil || binary.LittleEndian.Uint64(b) == 0 {
		return
	}
	f.Code, f.Function = true, binary.LittleEndian.Uint64(b)
	if f.Position == NoPosition {
		return
	}
	f.Position = NoPosition
	if b, err := runtimes.ReadMem(mem, opline+uint64(l.OpLineno), 4); err == nil {
		f.Position = min(binary.LittleEndian.Uint32(b), wordPositionMax)
	}
}

// position is the index of the op at opline in the ops at opcodes, last of
// them, or NoPosition.
func (l *Layout) position(opline, opcodes uint64, last uint32) uint32 {
	if opline < opcodes || (opline-opcodes)%uint64(l.OpSize) != 0 {
		return NoPosition
	}
	i := (opline - opcodes) / uint64(l.OpSize)
	if i >= uint64(last) {
		return NoPosition
	}
	return uint32(i)
}

// Frame words as the BPF walker (bpf/php.h) writes them: the
// zend_function's address in the low 48 bits (arm64's user addresses have
// them), the position in the next 15 (clamped to wordPositionMax;
// wordPositionNone: NoPosition), Entry in the top bit. A Code frame's word
// has its file name's address, 8-aligned, with wordCode in bit 0.
const (
	wordAddrBits     = 48
	wordPositionNone = 0x7fff
	wordPositionMax  = 0x7ffe
	wordEntry        = 1 << 63
	wordCode         = 1
)

// Word is f as the BPF walker writes it.
func (f WalkedFrame) Word() uint64 {
	pos := uint64(wordPositionNone)
	if f.Position != NoPosition {
		pos = min(uint64(f.Position), wordPositionMax)
	}
	w := f.Function&(1<<wordAddrBits-1) | pos<<wordAddrBits
	if f.Code {
		w |= wordCode
	}
	if f.Entry {
		w |= wordEntry
	}
	return w
}

// Object is the frame's object as the sample carries it, what Process
// names: the function's address, or the file name's with wordCode.
func (f WalkedFrame) Object() uint64 {
	if f.Code {
		return f.Function | wordCode
	}
	return f.Function
}

// FrameOfWord decodes a frame word of the BPF walker.
func FrameOfWord(w uint64) WalkedFrame {
	f := WalkedFrame{
		Function: w & (1<<wordAddrBits - 1) &^ wordCode,
		Position: uint32((w &^ wordEntry) >> wordAddrBits),
		Entry:    w&wordEntry != 0,
		Code:     w&wordCode != 0,
	}
	if f.Position == wordPositionNone {
		f.Position = NoPosition
	}
	return f
}
