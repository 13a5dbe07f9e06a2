package ruby

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// MaxFrames bounds the control frames Walk reads of one thread.
const MaxFrames = 4096

// WalkedFrame is one control frame as the walk records it.
type WalkedFrame struct {
	// Iseq is the frame's instruction sequence, 0 for a C frame.
	Iseq uint64
	// Position is the frame's pc - iseq_encoded, in VALUEs (the names of
	// Process take it).
	Position uint32
	// Magic is the frame's type (VM_FRAME_MAGIC_*, ep[0] &
	// FrameMagicMask).
	Magic uint32
	// MethodEntry is ep[VM_ENV_DATA_INDEX_ME_CREF] of a C frame or a
	// method frame: its rb_callable_method_entry_t (a C frame is named by
	// def->original_id, an ID; a method's class is its owner: ClassPath),
	// or a cref (ClassPath tells).
	MethodEntry uint64
	// Entry says the frame is the first its vm_exec call pushed
	// (VM_FRAME_FLAG_FINISH): it ends a run of frames under one native
	// vm_exec_core.
	Entry bool
}

// Walk walks the control frames of the execution context at ec, the
// running frame first, as the BPF walker (bpf/ruby.h) is to: it is that
// walker's reference. From ec: cfp, and the end of the VM stack
// (vm_stack + vm_stack_size VALUEs; control frames grow down from it, the
// last two are the thread's dummy frames). Per frame (CFPSize bytes at
// cfp, then cfp += CFPSize): iseq, pc, and ep[0]'s flags; a frame with
// VM_FRAME_FLAG_CFRAME or no iseq is a C frame (ep[-2] its method entry),
// a dummy frame (VM_FRAME_MAGIC_DUMMY) is skipped, a method frame's
// ep[-2] is its method entry, an iseq frame without a
// pc (pushed, not yet run) is skipped; the position is pc -
// iseq->body->iseq_encoded. At most MaxFrames frames are read.
func (l *Layout) Walk(mem io.ReaderAt, ec uint64) ([]WalkedFrame, error) {
	h, err := runtimes.ReadMem(mem, ec, int(l.ECCFP)+8)
	if err != nil {
		return nil, fmt.Errorf("read execution context at %#x: %w", ec, err)
	}
	stack := binary.LittleEndian.Uint64(h[l.ECVMStack:])
	size := binary.LittleEndian.Uint64(h[l.ECVMStackSize:])
	cfp := binary.LittleEndian.Uint64(h[l.ECCFP:])
	if size > 1<<28 {
		return nil, fmt.Errorf("execution context at %#x: VM stack of %d VALUEs", ec, size)
	}
	end := stack + size*8
	if cfp < stack || cfp > end {
		return nil, fmt.Errorf("execution context at %#x: cfp %#x outside its VM stack [%#x, %#x)", ec, cfp, stack, end)
	}
	var out []WalkedFrame
	for n := 0; cfp+uint64(l.CFPSize) <= end && n < MaxFrames; n, cfp = n+1, cfp+uint64(l.CFPSize) {
		f, err := runtimes.ReadMem(mem, cfp, int(l.CFPSize))
		if err != nil {
			return out, err
		}
		iseq := binary.LittleEndian.Uint64(f[l.CFPIseq:])
		pc := binary.LittleEndian.Uint64(f[l.CFPPC:])
		ep := binary.LittleEndian.Uint64(f[l.CFPEP:])
		env, err := runtimes.ReadMem(mem, ep-16, 24) // ep[-2], ep[-1], ep[0]
		if err != nil {
			return out, err
		}
		flags := binary.LittleEndian.Uint64(env[16:])
		w := WalkedFrame{Magic: uint32(flags & FrameMagicMask), Entry: flags&FrameFlagFinish != 0}
		switch {
		case w.Magic == FrameMagicDummy:
			continue
		case flags&FrameFlagCFrame != 0 || iseq == 0:
			w.MethodEntry = binary.LittleEndian.Uint64(env)
		case pc == 0:
			continue
		default:
			if w.Magic == FrameMagicMethod {
				w.MethodEntry = binary.LittleEndian.Uint64(env)
			}
			ih, err := runtimes.ReadMem(mem, iseq+uint64(l.IseqBody), 8)
			if err != nil {
				return out, err
			}
			body, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(ih)+uint64(l.BodyIseqEncoded), 8)
			if err != nil {
				return out, err
			}
			encoded := binary.LittleEndian.Uint64(body)
			if pc < encoded || (pc-encoded)/8 > maxIseqSize {
				return out, fmt.Errorf("frame at %#x: pc %#x outside its iseq's instructions at %#x", cfp, pc, encoded)
			}
			w.Iseq, w.Position = iseq, uint32((pc-encoded)/8)
		}
		out = append(out, w)
	}
	return out, nil
}

// MainEC returns the main thread's execution context from the VM at vm
// (*ruby_current_vm_ptr): vm->ractor.main_thread->ec.
func (l *Layout) MainEC(mem io.ReaderAt, vm uint64) (uint64, error) {
	th, err := runtimes.ReadMem(mem, vm+uint64(l.VMMainThread), 8)
	if err != nil {
		return 0, fmt.Errorf("read the main thread of the VM at %#x: %w", vm, err)
	}
	ec, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(th)+uint64(l.ThreadEC), 8)
	if err != nil {
		return 0, fmt.Errorf("read the main thread's execution context: %w", err)
	}
	return binary.LittleEndian.Uint64(ec), nil
}

// ECAddress is where a thread's ruby_current_ec is: its thread pointer
// tp's dtv (x86-64 glibc: tcbhead_t.dtv at tp+8) entry for the module id
// at tlsIndex (dtv entries are 16 bytes, {pointer, is_static}), plus the
// offset at tlsIndex+8. tlsIndex is the process address of
// Interpreter.ECTLS.Slot.
func ECAddress(mem io.ReaderAt, tp, tlsIndex uint64) (uint64, error) {
	ti, err := runtimes.ReadMem(mem, tlsIndex, 16)
	if err != nil {
		return 0, fmt.Errorf("read tls_index: %w", err)
	}
	module, offset := binary.LittleEndian.Uint64(ti), binary.LittleEndian.Uint64(ti[8:])
	if module == 0 || module > 1<<16 {
		return 0, fmt.Errorf("tls_index module %d", module)
	}
	dtv, err := runtimes.ReadMem(mem, tp+8, 8)
	if err != nil {
		return 0, fmt.Errorf("read dtv: %w", err)
	}
	block, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(dtv)+module*16, 8)
	if err != nil {
		return 0, fmt.Errorf("read dtv[%d]: %w", module, err)
	}
	return binary.LittleEndian.Uint64(block) + offset, nil
}
