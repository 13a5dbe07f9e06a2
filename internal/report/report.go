// Package report holds the plain values that flow from the kernel-facing
// collectors (CPU sampler, off-CPU tracer) through symbolization to the
// emitters (pdata, pprof files). It has no behaviour beyond small helpers.
package report

import (
	"time"
)

// Kind names a profile kind; it is also the prefix of pprof file names.
type Kind string

const (
	KindCPU    Kind = "cpu"
	KindOffCPU Kind = "offcpu"
	// KindProbeDuration weighs the stacks that entered a probe's scopes by
	// the scopes' durations; its Profile names the probe (ProbeID).
	KindProbeDuration Kind = "probe_duration"
	// Heap profiles (internal/allocs), named as runtime/pprof names its
	// heap profile's sample types: what was allocated in the report
	// window, and what was live at its end, estimated from the sampled
	// allocations; Period is the sampling rate in bytes.
	KindAllocObjects Kind = "alloc_objects"
	KindAllocSpace   Kind = "alloc_space"
	KindInuseObjects Kind = "inuse_objects"
	KindInuseSpace   Kind = "inuse_space"
)

// Memory reports whether k is one of the heap profiles.
func (k Kind) Memory() bool {
	return k == KindAllocObjects || k == KindAllocSpace || k == KindInuseObjects || k == KindInuseSpace
}

// Frame types, the values of the profile.frame.type location attribute.
const (
	FrameKernel = "kernel"
	FrameNative = "native"
	FrameGo     = "go"
	FrameV8JS   = "v8js"
	FramePython = "cpython"
	FrameJVM    = "jvm"
	// FrameJIT is code a JIT described in a perf map, as the symbolizer
	// returns it; assemble replaces it with the runtime's type (FrameV8JS,
	// ...) from the process identity.
	FrameJIT = "jit"
	// FrameUnknown marks a pseudo-frame standing for a stack that was lost
	// (see StackLoss.Marker); it has no address and no mapping.
	FrameUnknown = "unknown"
)

// Mapping is a memory mapping of a file into a process (or the kernel image).
type Mapping struct {
	Start, Limit, Offset uint64
	File                 string
	BuildIDGNU           string // hex GNU build id, when the file has one
	BuildIDGo            string // Go build id, when the file is a Go binary
}

// Frame is one symbolized (or not) program counter. A single address may
// expand to several frames when functions were inlined; inlined callees come
// first, carry Inlined=true and share the address and mapping of the frame
// they were inlined into.
type Frame struct {
	Address  uint64
	Function string // "" when the address could not be resolved
	File     string // source file, when known
	Line     int64
	Type     string   // one of the Frame* constants
	Inlined  bool     // this frame was inlined into the next one
	Mapping  *Mapping // nil when the address is outside any known mapping
}

// Sample is one aggregated stack of one thread. Frames are leaf first.
type Sample struct {
	TID        uint32
	ThreadName string
	Frames     []Frame
	Value      int64 // samples for CPU, nanoseconds for off-CPU
	// Scope is the probe scope the thread was inside when the samples were
	// taken, until it is resolved: the receiver sets Link when the scope's
	// log record was sent, and clears Scope.
	Scope *SampleScope
	// Link joins the samples to the log record of their probe scope.
	Link *ScopeLink
	// Trace is the span the thread worked for, from its SDK's thread
	// context (OTEP 4947); nil: none. Attributes are its record's
	// attributes, named by the process context's key map, or, in a Go
	// program, its goroutine's pprof labels, keyed as the program wrote them.
	Trace      *TraceLink
	Attributes map[string]string
}

// TraceLink is an OpenTelemetry span: its trace and span id.
type TraceLink struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// SampleScope is a probe scope instance of a sample's thread: its probe's
// index and its start (CLOCK_MONOTONIC ns). Goroutine: the scope is the
// sample's goroutine's (a Go function's), whose record may name another
// thread than the sample.
type SampleScope struct {
	ProbeIndex int
	Start      uint64
	Goroutine  bool
}

// ScopeLink names the log record of a probe scope: its trace and span id
// (ScopeRecord) and its probe.
type ScopeLink struct {
	TraceID [16]byte
	SpanID  [8]byte
	ProbeID string
}

// Identity is what is known about a process; Attributes holds the resource
// attributes of the data contract (process.pid, container.id, ...).
type Identity struct {
	PID        uint32 // pid as the collector's /proc sees it
	ExeName    string
	ExePath    string
	Attributes map[string]any // string, bool, integer or float values, keyed by attribute name
}

// Process groups the samples of one process in one report.
type Process struct {
	Identity Identity
	Samples  []Sample
}

// Profile is one report of one kind for every observed process.
type Profile struct {
	Kind   Kind
	Start  time.Time
	End    time.Time
	Period int64 // nanoseconds between samples (CPU), bytes (heap profiles); 0 for off-CPU
	// ProbeID names the probe of a KindProbeDuration profile.
	ProbeID   string
	Processes []Process
}

// SampleType returns the (type, unit) of the values of samples of kind k.
func (k Kind) SampleType() (typ, unit string) {
	switch k {
	case KindOffCPU:
		return "off_cpu", "nanoseconds"
	case KindProbeDuration:
		return "probe_duration", "nanoseconds"
	case KindAllocObjects, KindInuseObjects:
		return string(k), "count"
	case KindAllocSpace, KindInuseSpace:
		return string(k), "bytes"
	}
	return "samples", "count"
}

// PeriodType returns the (type, unit) of the sampling period of kind k.
func (k Kind) PeriodType() (typ, unit string) {
	if k.Memory() {
		return "space", "bytes"
	}
	return "cpu", "nanoseconds"
}

// ScopeRecord is one completed outermost scope of a uprobe duration probe.
// Times are unix nanoseconds converted from the kernel's monotonic clock
// with the offset shared with profile timestamps.
type ScopeRecord struct {
	// TraceID and SpanID identify this scope instance (assemble.ScopeIDs).
	TraceID     [16]byte
	SpanID      [8]byte
	ProbeID     string
	EntrySymbol string
	ExitSymbol  string
	// EntryUSDT and ExitUSDT name a USDT probe's pair ("provider:name"),
	// where the symbols are empty.
	EntryUSDT, ExitUSDT string
	Start, End          uint64
	// Observed is when the record was read from the kernel (unix ns); 0:
	// when the log records were built.
	Observed   uint64
	TID        uint32
	ThreadName string
	MainThread bool
	// Labels are the goroutine's pprof labels (a Go function's scope),
	// keyed as the program wrote them; nil: none.
	Labels map[string]string
	// Args are the USDT arguments the probe's attributes name; nil: none.
	Args []ScopeArg
}

// ScopeArg is one USDT argument of a scope record, as the attribute Key:
// the string Str (IsString) or the integer Int.
type ScopeArg struct {
	Key      string
	Str      string
	Int      int64
	IsString bool
}

// ProcessScopes groups the scope records of one process.
type ProcessScopes struct {
	Identity Identity
	Records  []ScopeRecord
}
