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

// Stats count what happened in one Drain window; they describe exactly the
// samples that Drain returned (the counters are double-buffered like them).
// A record is a sample (CPU) or a wait (off-CPU).
type Stats struct {
	// Recorded counts records aggregated, including those kept without a
	// stack (UserStackLost, KernelStackLost).
	Recorded uint64
	// LostMapFull counts records dropped: the counts map was full (off-CPU:
	// or a sleeping thread's start could not be stored).
	LostMapFull uint64
	// UserStackLost and KernelStackLost count recorded records without that
	// stack, by reason. StackMissing is found at drain, per aggregated
	// entry: it counts records when Maps.CountsAreSamples, else entries
	// (each at least one record).
	UserStackLost, KernelStackLost StackLosses
	// NewProcessDrops counts new-process notifications lost (CPU sampler
	// only; see sampler.Sampler.NewProcesses): the BPF ring buffer was full
	// (that process is announced again on a later sample) or the Go channel
	// was full (that notification is gone). No sample is lost with them.
	NewProcessDrops uint64
	// UnwindEnds counts the user stacks of the records that were walked
	// with unwind tables, by why the walk ended; UnwindFrames the frames
	// they found.
	UnwindEnds   UnwindEnds
	UnwindFrames uint64
	// PythonEnds counts the records of threads of CPython processes whose
	// Python frames were read, by why the walk ended; PythonFrames the
	// frames found; PythonStackLost the walks whose frames could not be
	// stored (the sample is kept with its native frames).
	PythonEnds      PythonEnds
	PythonFrames    uint64
	PythonStackLost uint64
	// ThreadContexts count the reads of the OpenTelemetry thread context of
	// samples of processes that publish one.
	ThreadContexts ThreadContextStats
	// GoLabels count the reads of the labels of samples of Go processes.
	GoLabels GoLabelStats
	// ThreadContextProcesses and GoLabelProcesses are, at the drain, the
	// processes whose thread context, or Go labels, BPF reads (gauges).
	ThreadContextProcesses, GoLabelProcesses uint64
	// ContextFailures count, since the previous drain, the files and
	// processes whose published context is not read.
	ContextFailures ContextFailures
	// PythonProcesses is, at the drain, the processes whose CPython frames
	// BPF reads (a gauge, like UnwindTables).
	PythonProcesses uint64
	// PythonVersions counts PythonProcesses by the interpreter's version
	// ("3.14").
	PythonVersions map[string]uint64
	// PythonUnsupported counts the files holding a CPython interpreter the
	// walker refused (a version or build it cannot read, inconsistent
	// _Py_DebugOffsets) since the previous window; PythonUnsupportedErrors
	// are why, each distinct reason once.
	PythonUnsupported       uint64
	PythonUnsupportedErrors []string
	// JVMProcesses is, at the drain, the JVMs whose Java frames the walk
	// steps through (bpf/hotspot.h; a gauge).
	JVMProcesses uint64
	// V8Processes is, at the drain, the node processes whose JavaScript
	// frames the walk reads (bpf/v8.h; a gauge).
	V8Processes uint64
	// UnwindTables and UnwindTableBytes are, at the drain, the files with an
	// unwind table in the kernel and the kernel memory of their rows;
	// TableFailures counts the files left without one since the previous
	// drain (their mappings are walked with frame pointers).
	UnwindTables, UnwindTableBytes uint64
	TableFailures                  TableFailures
	// TableFailureNotes are the first file of each reason left without a
	// table in the collector's life, for one log line each.
	TableFailureNotes []string
	// TablesReady are how long the processes announced since the previous
	// drain waited for the tables of all their files (a sample of them
	// when very many started).
	TablesReady []time.Duration
}

// TableFailure says why a file got no unwind table.
type TableFailure uint8

const (
	TableOpenFailed TableFailure = iota // the file could not be opened (refused, vanished)
	TableMalformed                      // the ELF file or its CFI could not be read
	TableTooLarge                       // more rows than the kernel's search covers
	TableSpaceFull                      // the tables' memory budget (or their slots) used up
	TableMapFailed                      // the kernel refused to create the table's map
	numTableFailures
)

// TableFailures counts files, indexed by TableFailure.
type TableFailures [numTableFailures]uint64

// AllTableFailures lists every TableFailure, in order.
var AllTableFailures = []TableFailure{TableOpenFailed, TableMalformed, TableTooLarge, TableSpaceFull, TableMapFailed}

// Reason is the failure's telemetry attribute value.
func (f TableFailure) Reason() string {
	return [...]string{"open_failed", "malformed", "too_large", "space_full", "map_failed"}[f]
}

// UnwindEnd says why a walk of a user stack with unwind tables ended
// (bpf/common.h, enum unwind_end).
type UnwindEnd uint8

const (
	UnwindRoot        UnwindEnd = iota // reached the thread's root: a whole stack
	UnwindNoMapping                    // a return address in no known mapping
	UnwindUnsupported                  // CFI the walk cannot follow
	UnwindReadFault                    // reading the user stack failed
	UnwindDepth                        // the frame limit
	UnwindBadFrame                     // the stack pointer did not grow
	numUnwindEnds
)

// UnwindEnds counts walks, indexed by UnwindEnd.
type UnwindEnds [numUnwindEnds]uint64

// Total is the number of walks.
func (e UnwindEnds) Total() uint64 {
	var n uint64
	for _, v := range e {
		n += v
	}
	return n
}

// AllUnwindEnds lists every UnwindEnd, in order.
var AllUnwindEnds = []UnwindEnd{UnwindRoot, UnwindNoMapping, UnwindUnsupported, UnwindReadFault, UnwindDepth, UnwindBadFrame}

// Reason is the end's telemetry attribute value.
func (e UnwindEnd) Reason() string {
	return [...]string{"root", "no_mapping", "unsupported_cfi", "read_fault", "depth_limit", "bad_frame"}[e]
}

// PythonEnd says why a walk of a thread's CPython frames ended
// (bpf/common.h, enum python_end).
type PythonEnd uint8

const (
	PythonRoot      PythonEnd = iota // the thread's first frame: every Python frame
	PythonNoThread                   // the thread has no Python thread state
	PythonReadFault                  // reading the interpreter's memory failed
	PythonDepth                      // the frame limit: the stack is cut
	numPythonEnds
)

// PythonEnds counts Python walks, indexed by PythonEnd.
type PythonEnds [numPythonEnds]uint64

// AllPythonEnds lists every PythonEnd, in order.
var AllPythonEnds = []PythonEnd{PythonRoot, PythonNoThread, PythonReadFault, PythonDepth}

// Reason is the end's telemetry attribute value.
func (e PythonEnd) Reason() string {
	return [...]string{"root", "no_thread_state", "read_fault", "depth_limit"}[e]
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	s.Recorded += o.Recorded
	s.LostMapFull += o.LostMapFull
	for i := range s.UserStackLost {
		s.UserStackLost[i] += o.UserStackLost[i]
		s.KernelStackLost[i] += o.KernelStackLost[i]
	}
	s.NewProcessDrops += o.NewProcessDrops
	for i := range s.UnwindEnds {
		s.UnwindEnds[i] += o.UnwindEnds[i]
	}
	s.UnwindFrames += o.UnwindFrames
	for i := range s.PythonEnds {
		s.PythonEnds[i] += o.PythonEnds[i]
	}
	s.PythonFrames += o.PythonFrames
	s.PythonStackLost += o.PythonStackLost
	s.ThreadContexts = s.ThreadContexts.Add(o.ThreadContexts)
	s.GoLabels = s.GoLabels.Add(o.GoLabels)
	s.ContextFailures = s.ContextFailures.Add(o.ContextFailures)
	for i := range s.TableFailures {
		s.TableFailures[i] += o.TableFailures[i]
	}
	s.TablesReady = append(s.TablesReady[:len(s.TablesReady):len(s.TablesReady)], o.TablesReady...)
	s.TableFailureNotes = append(s.TableFailureNotes[:len(s.TableFailureNotes):len(s.TableFailureNotes)], o.TableFailureNotes...)
	s.PythonUnsupported += o.PythonUnsupported
	s.PythonUnsupportedErrors = append(s.PythonUnsupportedErrors[:len(s.PythonUnsupportedErrors):len(s.PythonUnsupportedErrors)],
		o.PythonUnsupportedErrors...)
	// Gauges: the later window's.
	s.UnwindTables, s.UnwindTableBytes = o.UnwindTables, o.UnwindTableBytes
	s.PythonProcesses, s.JVMProcesses, s.V8Processes = o.PythonProcesses, o.JVMProcesses, o.V8Processes
	s.PythonVersions = o.PythonVersions
	return s
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
}

// MainThread reports whether the scope ran on the process's main thread.
func (s RawScope) MainThread() bool { return s.PID == s.TID }

// Duration is End - Start.
func (s RawScope) Duration() time.Duration { return time.Duration(s.End - s.Start) }
