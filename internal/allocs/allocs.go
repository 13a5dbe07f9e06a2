// Package allocs gives heap profiles of Go processes with no change to
// them: the Go runtime samples about one allocation per
// runtime.MemProfileRate bytes (512 KiB unless the program sets it) and
// calls its profiling hooks for those only, and again when a sampled object
// is swept. Uprobes on the hooks (bpf/alloc.bpf.c) report each sampled
// allocation with its goroutine's stack and labels, each free of a sampled
// object and each garbage collection; a Tracker turns them into
// alloc_objects/alloc_space (what was allocated in a report window) and
// inuse_objects/inuse_space (what is live at its end), scaled as
// runtime/pprof scales heap samples.
//
// A Go executable built without a reference to runtime.MemProfile (no
// runtime/pprof, net/http/pprof or similar) has the runtime set
// MemProfileRate to 0 at start: it samples nothing, and has no profile.
//
// Native allocators that fire the OpenTelemetry memory probes
// otel_memory:alloc(ptr, size, weighted_bytes) and otel_memory:free(ptr)
// (in an executable or a shared library) are profiled through the same
// Tracker: the kernel side samples about one allocation per USDTInterval
// weighted bytes of each thread and reports the sampled objects' frees.
package allocs

import (
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Options configure a Manager.
type Options struct {
	Proc         procfs.FS
	Logger       *zap.Logger
	PIDNamespace procfs.PIDNamespace
	// Go probes the allocation hooks of Go executables.
	Go bool
	// USDT probes the otel_memory sites of mapped files (Linux 5.15:
	// without attach cookies they are not probed, with a warning).
	USDT bool
	// USDTInterval is the mean weighted bytes between sampled
	// otel_memory allocations of a thread (DefaultUSDTInterval when 0).
	USDTInterval uint64
	// TargetPIDs limits the processes probed; empty: every process.
	TargetPIDs []uint32
	// MaxLive bounds the sampled objects kept as live (DefaultMaxLive
	// when 0); beyond it the oldest are dropped (Stats.Evicted).
	MaxLive int
	// RescanInterval is how often new processes are looked for (a
	// process that exec'ed is looked at on its exec).
	RescanInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.USDTInterval == 0 {
		o.USDTInterval = DefaultUSDTInterval
	}
	if o.RescanInterval <= 0 {
		o.RescanInterval = time.Second
	}
	return o
}

// Stats count what a Manager did since Open.
type Stats struct {
	Executables int // Go executables probed
	Refused     int // Go executables not probed (release not known, hooks not found, attach failed), files whose otel_memory probes were refused
	Processes   int // processes of probed executables found
	USDTFiles   int // files whose otel_memory probes are probed
	// From the Tracker (see its fields).
	Mallocs, Frees, UnmatchedFrees, Replaced, Evicted uint64
	Live                                              int
	// From the kernel: events lost to a full ring buffer, mallocs
	// without a stack, label sets that could not be read.
	RingbufFull, StackLost, LabelsLost uint64
	USDTArgsLost                       uint64 // otel_memory firings whose arguments could not be read
	ExecsDropped                       uint64 // execs not looked at: too many waiting
}
