// Package capture defines what the kernel-facing sources hand over and
// internal/assemble takes, once: raw stacks of typed frames (internal/sampler,
// internal/offcpu), probe scopes (internal/probes), the statistics of a drain
// window with named loss reasons, and process announcements. Plain values;
// no behaviour beyond small helpers.
package capture

import (
	"runtime"
	"strings"
	"time"
)

// FrameKind says what kind of code a raw frame is in; each kind is
// symbolized its own way.
type FrameKind uint8

const (
	// KernelFrame is a kernel text address.
	KernelFrame FrameKind = iota + 1
	// UserFrame is a user-space address: native, Go or JIT code, told apart
	// when symbolized.
	UserFrame
	// RuntimeFrame is a frame of a language runtime (an interpreter), read
	// by the runtime's BPF walker: Runtime says which, Address is the
	// object it runs (CPython: its code object) in the process, Position
	// where in that object it is (CPython: the instruction, in code units).
	RuntimeFrame
	// LinkRegisterFrame is arm64's x30 after the pc of a stack taken by
	// frame pointers (bpf/cpu.bpf.c): the leaf's caller when the leaf has
	// saved no frame record, else a return address into the leaf itself;
	// internal/assemble tells which.
	LinkRegisterFrame
)

// Runtime is the language runtime of a RuntimeFrame; its package in
// internal/runtimes names the frame. The values are the kernel's too
// (bpf/runtimes.h enum runtime_id) and each runtime's Runtime.ID.
type Runtime uint8

const (
	CPython Runtime = iota + 1 // bpf/cpython.h
	HotSpot                    // bpf/hotspot.h
	V8                         // bpf/v8.h
	Ruby                       // bpf/ruby.h
	PHP                        // bpf/php.h
)

// Apart says the runtime is walked apart from the native walk
// (bpf/apart.h): its frames are a stack of their own, whose runs take the
// place of its entry function's calls.
func (r Runtime) Apart() bool {
	return r == CPython || r == Ruby || r == PHP
}

// Name is the runtime's name in internal/runtimes (and its frames'
// profile.frame.type); "" for an unknown runtime.
func (r Runtime) Name() string {
	switch r {
	case CPython:
		return "cpython"
	case HotSpot:
		return "jvm"
	case V8:
		return "v8js"
	case Ruby:
		return "ruby"
	case PHP:
		return "php"
	}
	return ""
}

// Frame is one raw frame: every frame but the leaf is a return address.
type Frame struct {
	Kind FrameKind
	// RuntimeFrame only: the runtime, and whether the frame is the
	// outermost of one call of the runtime's native entry function (the
	// runtime frames after the previous such frame ran in that call).
	Runtime  Runtime
	Entry    bool
	Position uint32 // RuntimeFrame only: where in the object the frame is
	Address  uint64
	// Native is, for a runtime frame the walk read in place (bpf/hotspot.h, bpf/v8.h),
	// the address of the native frame it names; 0 otherwise.
	Native uint64
}

// Runtime frame words as the BPF walkers write them: the object's address
// in the low bits, the position above it, the Entry flag in the top bit.
// The words of the runtimes walked apart (bpf/apart.h) keep 48 address
// bits, arm64's user addresses, and 15 of position; the in-place words of the walkers
// (bpf/hotspot.h, bpf/v8.h) keep 47 and 16 on x86-64, whose user addresses
// are below 2^47, and 48 and 15 on arm64 (IN_PLACE_ADDR_BITS, bpf/arch.h).
const (
	apartAddrBits = 48
	runtimeEntry  = 1 << 63
)

// linkRegisterMark is the top byte of a LINK_REGISTER_WORD (bpf/arch.h):
// bits 56-62, which no user address has, and not runtimeEntry.
const linkRegisterMark = 0x7f

var inPlaceAddrBits = inPlaceAddrBitsOf(runtime.GOARCH)

func inPlaceAddrBitsOf(goarch string) uint {
	if goarch == "arm64" {
		return 48
	}
	return 47
}

// InPlacePositionUnknown is the position of an in-place word whose walker
// could not tell it (all ones in 16 bits); a 15-bit word's all ones is
// decoded as it.
const InPlacePositionUnknown = 0xffff

// RuntimeFrames decodes the frame words of a stack of runtime rt (leaf
// first).
func RuntimeFrames(rt Runtime, words []uint64) []Frame {
	return runtimeFrames(rt, words, inPlaceAddrBits)
}

func runtimeFrames(rt Runtime, words []uint64, inPlaceBits uint) []Frame {
	bits := inPlaceBits
	if rt.Apart() {
		bits = apartAddrBits
	}
	out := make([]Frame, 0, len(words))
	for _, w := range words {
		pos := uint32((w &^ runtimeEntry) >> bits)
		if !rt.Apart() && pos == 1<<(63-bits)-1 {
			pos = InPlacePositionUnknown
		}
		out = append(out, Frame{
			Kind:     RuntimeFrame,
			Runtime:  rt,
			Address:  w & (1<<bits - 1),
			Position: pos,
			Entry:    w&runtimeEntry != 0,
		})
	}
	return out
}

// RawStack is one aggregated stack of one thread, as captured.
type RawStack struct {
	PID, TID uint32
	Comm     string  // thread name recorded by BPF; "" when unknown
	Frames   []Frame // leaf first: kernel frames, then user frames
	Value    uint64  // sample count (CPU) or nanoseconds (off-CPU)
	// UserLoss and KernelLoss say why a stack that should be there is not
	// (the sample is kept); StackKept otherwise.
	UserLoss, KernelLoss StackLoss
	// Scope is the probe scope the thread was inside; nil: none (or no
	// probe links samples).
	Scope *ScopeRef
	// Trace is the OpenTelemetry thread context the thread had published;
	// nil: none.
	Trace *TraceContext
	// GoLabels are its goroutine's pprof labels; nil: none.
	GoLabels *GoLabels
}

// ScopeRef names a probe scope instance of a thread: its probe's index and
// its start (CLOCK_MONOTONIC ns), as RawScope.ProbeIndex and Start have
// them once it completes. A goroutine's scope (a Go function's) is the
// sample's goroutine's: its record may name another thread.
type ScopeRef struct {
	ProbeIndex int
	Start      uint64
	Goroutine  bool
}

// Addresses returns the addresses of the frames of kind, in order.
func (s RawStack) Addresses(kind FrameKind) []uint64 {
	var out []uint64
	for _, f := range s.Frames {
		if f.Kind == kind {
			out = append(out, f.Address)
		}
	}
	return out
}

// StackFrames builds the frames of a stack from its kernel and user
// addresses (each leaf first). A user word with the top bit set, which no
// user address has, is the runtime frame the walk read in place at the
// native frame before it, a word as RuntimeFrames decodes: an interpreted
// Java frame's Method* (bpf/hotspot.h, aligned) or a JavaScript frame's
// SharedFunctionInfo (bpf/v8.h, a tagged pointer: bit 0 set). A word with
// bits 56-62 set and not the top one is arm64's x30 (LinkRegisterFrame).
func StackFrames(kernel, user []uint64) []Frame {
	if len(kernel)+len(user) == 0 {
		return nil
	}
	out := make([]Frame, 0, len(kernel)+len(user))
	for _, a := range kernel {
		out = append(out, Frame{Kind: KernelFrame, Address: a})
	}
	var native uint64
	for _, a := range user {
		if a>>56 == linkRegisterMark {
			out = append(out, Frame{Kind: LinkRegisterFrame, Address: a &^ (linkRegisterMark << 56)})
			continue
		}
		if a&runtimeEntry != 0 {
			rt := HotSpot
			if a&1 != 0 {
				rt = V8
			}
			f := RuntimeFrames(rt, []uint64{a})[0]
			f.Native = native
			out = append(out, f)
			continue
		}
		native = a
		out = append(out, Frame{Kind: UserFrame, Address: a})
	}
	return out
}

// StackLoss says why a recorded sample has no frames for one of its stacks
// (user or kernel). Such samples are kept, with a marker frame, so process
// totals stay right and a flame graph shows the loss.
type StackLoss uint8

const (
	StackKept          StackLoss = iota // not lost (or no stack to take, e.g. the user stack of a kernel thread)
	StackMapFull                        // the BPF stack map was full
	StackHashCollision                  // the stack's ids were all taken by other stacks
	StackCaptureFailed                  // the kernel could not capture the stack
	StackMissing                        // the stack's id was absent from the stack map at drain
)

// AllStackLosses lists every loss, in order.
var AllStackLosses = []StackLoss{StackMapFull, StackHashCollision, StackCaptureFailed, StackMissing}

// Reason is the loss's telemetry attribute value ("" for StackKept).
func (l StackLoss) Reason() string {
	switch l {
	case StackMapFull:
		return "stack_map_full"
	case StackHashCollision:
		return "hash_collision"
	case StackCaptureFailed:
		return "capture_failed"
	case StackMissing:
		return "missing_at_drain"
	}
	return ""
}

// Marker is the function name of the pseudo-frame standing for a lost user
// (kernel false) or kernel stack, e.g. "[user stack lost: stack map full]".
func (l StackLoss) Marker(kernel bool) string {
	if l == StackKept {
		return ""
	}
	which := "user"
	if kernel {
		which = "kernel"
	}
	return "[" + which + " stack lost: " + strings.ReplaceAll(l.Reason(), "_", " ") + "]"
}

// StackLosses counts recorded samples kept without one of their stacks,
// indexed by StackLoss (StackKept stays 0).
type StackLosses [StackMissing + 1]uint64

// Total is the sum over every reason.
func (l StackLosses) Total() uint64 {
	var n uint64
	for _, v := range l {
		n += v
	}
	return n
}

// ProcessEvent is an announcement of a process (pid as the collector sees
// it): recorded for the first time; with Exec, gone through an exec, so
// whatever was read about its old program is stale; with Exit, exited (its
// samples may still be in the window being recorded); with Rescan, walked
// into an address in no mapping its tables cover (a library loaded later,
// new JIT code), so its mappings are worth reading again. At most one flag
// is set.
type ProcessEvent struct {
	PID    uint32
	Exec   bool
	Exit   bool
	Rescan bool
}

// RawScope is one completed outermost scope of a probe. Times are the
// kernel's monotonic clock (bpf_ktime_get_ns).
type RawScope struct {
	ProbeIndex int    // index of the probe in the configuration
	PID, TID   uint32 // pid (tgid) and thread id, as the collector sees them
	Comm       string // thread name at the end of the scope
	Start, End uint64 // CLOCK_MONOTONIC nanoseconds
	// EntryStack is the user stack at the scope's entry, leaf first, for a
	// probe that keeps entry stacks; EntryStackLoss says why it is missing.
	EntryStack     []uint64
	EntryStackLoss StackLoss
	// GoLabels are the pprof labels of a Go function's goroutine at the
	// scope's end; nil: none.
	GoLabels map[string]string
	// Args are the USDT arguments the probe's attributes name, fetched at
	// the scope's entry, in the attributes' order; nil: none.
	Args []ProbeArg
}

// ProbeArg is one USDT argument of a scope: an integer, or the string it
// pointed at (which the probe's attribute says).
type ProbeArg struct {
	Int    int64
	Str    string
	Failed bool // not read (unreadable memory, or no string there)
}

// MainThread reports whether the scope ran on the process's main thread.
func (s RawScope) MainThread() bool { return s.PID == s.TID }

// Duration is End - Start.
func (s RawScope) Duration() time.Duration { return time.Duration(s.End - s.Start) }
