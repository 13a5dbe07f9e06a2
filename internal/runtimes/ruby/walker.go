package ruby

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// ErrTLSNotRelocated means the process's copy of ruby_current_ec's GOT slot
// is not relocated yet (ld.so has not run over libruby): ask again later.
var ErrTLSNotRelocated = errors.New("ruby: ruby_current_ec's TLS slot is not relocated yet")

// Bounds of what a process's GOT slot may hold.
const (
	maxTLSModule = 1 << 16 // a dtv index: the process's modules with TLS
	maxStaticTLS = 1 << 24 // an arm64 descriptor's static tp offset; above it, a pointer
	tlsTCBSize   = 16      // arm64 glibc: the TCB below the first static block (variant I)
)

// walkerProc is bpf/ruby.h's struct ruby_proc.
type walkerProc struct {
	TlsOffset       uint64
	TlsModule       uint64
	EcVmStack       uint32
	EcVmStackSize   uint32
	EcCfp           uint32
	CfpPc           uint32
	CfpIseq         uint32
	CfpEp           uint32
	CfpSize         uint32
	IseqBody        uint32
	BodyIseqEncoded uint32
	TlsStatic       uint8
	Reserved        [3]uint8
}

// WalkerProc is the ruby_procs entry of a process that maps the VM's file
// with load bias bias: where its threads' ruby_current_ec is, from the GOT
// slot ld.so relocated in the process (mem), and the offsets of the
// version. ErrTLSNotRelocated: the process is not ready.
func (in *Interpreter) WalkerProc(mem io.ReaderAt, bias uint64) ([]byte, error) {
	if in.ECTLS.Slot == 0 {
		return nil, fmt.Errorf("%w (ruby %s)", ErrNoECTLS, in.Version)
	}
	v, err := in.tlsOf(mem, bias+in.ECTLS.Slot)
	if err != nil {
		return nil, err
	}
	l := &in.Layout
	v.EcVmStack, v.EcVmStackSize, v.EcCfp = l.ECVMStack, l.ECVMStackSize, l.ECCFP
	v.CfpPc, v.CfpIseq, v.CfpEp, v.CfpSize = l.CFPPC, l.CFPIseq, l.CFPEP, l.CFPSize
	v.IseqBody, v.BodyIseqEncoded = l.IseqBody, l.BodyIseqEncoded
	return binary.Append(nil, binary.NativeEndian, &v)
}

// tlsOf reads the relocated GOT slot at slot: on x86-64 a tls_index
// {module, offset} (dynamic TLS); on arm64 a TLS descriptor {resolver,
// argument} whose argument is the tp offset of a static block's variable
// (small) or a pointer to a tls_index (dynamic). The offset found must be
// the file's (ECTLS.Offset).
func (in *Interpreter) tlsOf(mem io.ReaderAt, slot uint64) (walkerProc, error) {
	b, err := runtimes.ReadMem(mem, slot, 16)
	if err != nil {
		return walkerProc{}, fmt.Errorf("ruby: read ruby_current_ec's TLS slot: %w", err)
	}
	first, second := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	if first == 0 {
		return walkerProc{}, ErrTLSNotRelocated
	}
	if in.Machine == elf.EM_AARCH64 {
		if second < maxStaticTLS {
			if second < in.ECTLS.Offset+tlsTCBSize {
				return walkerProc{}, fmt.Errorf("ruby: static TLS descriptor's offset %#x is below libruby's variable at %#x", second, in.ECTLS.Offset)
			}
			return walkerProc{TlsOffset: second, TlsStatic: 1}, nil
		}
		if b, err = runtimes.ReadMem(mem, second, 16); err != nil {
			return walkerProc{}, fmt.Errorf("ruby: read the TLS descriptor's tls_index: %w", err)
		}
		first, second = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	}
	if first > maxTLSModule {
		return walkerProc{}, fmt.Errorf("ruby: tls_index module %d", first)
	}
	if second != in.ECTLS.Offset {
		return walkerProc{}, fmt.Errorf("ruby: tls_index offset %#x, the file's is %#x", second, in.ECTLS.Offset)
	}
	return walkerProc{TlsOffset: second, TlsModule: first}, nil
}

// FrameKind is what the object of a frame word is.
type FrameKind uint8

const (
	FrameIseq        FrameKind = iota + 1 // an rb_iseq_t: an iseq frame
	FrameMethodEntry                      // an rb_callable_method_entry_t: a method frame (MethodIseq) or a C frame
)

// Frame words as bpf/ruby.h writes them: the object's address (48 bits),
// the position (15 bits, clamped), the vm_exec entry flag (bit 63).
const (
	wordAddrBits = 48
	wordEntry    = 1 << 63
)

// DecodeWord splits a frame word into its object, position and entry flag.
func DecodeWord(w uint64) (object uint64, position uint32, entry bool) {
	return w & (1<<wordAddrBits - 1), uint32(w &^ wordEntry >> wordAddrBits), w&wordEntry != 0
}

// FrameObject tells what the object of a frame word is, from its own
// RBasic.flags: an imemo of type imemo_iseq or imemo_ment.
func (l *Layout) FrameObject(mem io.ReaderAt, object uint64) (FrameKind, error) {
	b, err := runtimes.ReadMem(mem, object, 8)
	if err != nil {
		return 0, fmt.Errorf("ruby: read the flags of frame object %#x: %w", object, err)
	}
	flags := binary.LittleEndian.Uint64(b)
	if flags&tMask == tImemo {
		switch flags >> imemoShift & 0xf {
		case imemoIseq:
			return FrameIseq, nil
		case imemoMent:
			return FrameMethodEntry, nil
		}
	}
	return 0, fmt.Errorf("ruby: frame object %#x is no iseq or method entry (flags %#x): %w", object, flags, ErrNotIseq)
}

// MethodIseq is the iseq of the Ruby method whose method entry is at me
// (me->def->body.iseq.iseqptr), an error when the method is no Ruby one
// (a C function's, an alias's).
func (l *Layout) MethodIseq(mem io.ReaderAt, me uint64) (uint64, error) {
	b, err := runtimes.ReadMem(mem, me+uint64(l.MethodEntryDef), 8)
	if err != nil {
		return 0, fmt.Errorf("ruby: read the definition of method entry %#x: %w", me, err)
	}
	def := binary.LittleEndian.Uint64(b)
	if b, err = runtimes.ReadMem(mem, def, int(l.MethodDefIseq)+8); err != nil {
		return 0, fmt.Errorf("ruby: read method definition %#x: %w", def, err)
	}
	if typ := b[0] & methodTypeMask; typ != methodTypeIseq {
		return 0, fmt.Errorf("ruby: method entry %#x is of method type %d, not a Ruby method's", me, typ)
	}
	iseq := binary.LittleEndian.Uint64(b[l.MethodDefIseq:])
	if kind, err := l.FrameObject(mem, iseq); err != nil || kind != FrameIseq {
		return 0, fmt.Errorf("ruby: method entry %#x's iseq %#x is no iseq", me, iseq)
	}
	return iseq, nil
}
