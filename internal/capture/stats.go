package capture

import "time"

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
	PythonEnds      RuntimeEnds
	PythonFrames    uint64
	PythonStackLost uint64
	// RubyWalks and PHPWalks count the walks of the threads of Ruby and
	// PHP processes whose frames were read.
	RubyWalks, PHPWalks RuntimeWalks
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
	// RubyProcesses and PHPProcesses are, at the drain, the processes whose
	// Ruby, or PHP, frames BPF reads (bpf/ruby.h, bpf/php.h; gauges).
	RubyProcesses, PHPProcesses uint64
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
	TableNoJITRow                       // its runtime's JIT code row could not be made (the code walked with frame pointers)
	numTableFailures
)

// TableFailures counts files, indexed by TableFailure.
type TableFailures [numTableFailures]uint64

// AllTableFailures lists every TableFailure, in order.
var AllTableFailures = []TableFailure{TableOpenFailed, TableMalformed, TableTooLarge, TableSpaceFull, TableMapFailed, TableNoJITRow}

// Reason is the failure's telemetry attribute value.
func (f TableFailure) Reason() string {
	return [...]string{"open_failed", "malformed", "too_large", "space_full", "map_failed", "no_jit_row"}[f]
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

// RuntimeEnd says why a walk of the frames of a runtime walked apart
// (CPython, Ruby, PHP; bpf/common.h, enum runtime_end) ended.
type RuntimeEnd uint8

const (
	RuntimeRoot      RuntimeEnd = iota // the thread's first frame: every frame of the runtime
	RuntimeNoThread                    // the thread has no state of the runtime
	RuntimeReadFault                   // reading the runtime's memory failed
	RuntimeDepth                       // the frame limit: the stack is cut
	numRuntimeEnds
)

// RuntimeEnds counts walks, indexed by RuntimeEnd.
type RuntimeEnds [numRuntimeEnds]uint64

// AllRuntimeEnds lists every RuntimeEnd, in order.
var AllRuntimeEnds = []RuntimeEnd{RuntimeRoot, RuntimeNoThread, RuntimeReadFault, RuntimeDepth}

// Reason is the end's telemetry attribute value.
func (e RuntimeEnd) Reason() string {
	return [...]string{"root", "no_thread_state", "read_fault", "depth_limit"}[e]
}

// RuntimeWalks count the walks of one runtime walked apart: Ends by why
// they ended, Frames the frames found, StackLost the walks whose frames
// could not be stored (the sample is kept with its native frames).
type RuntimeWalks struct {
	Ends      RuntimeEnds
	Frames    uint64
	StackLost uint64
}

// Add returns the sum of w and o.
func (w RuntimeWalks) Add(o RuntimeWalks) RuntimeWalks {
	for i := range w.Ends {
		w.Ends[i] += o.Ends[i]
	}
	w.Frames += o.Frames
	w.StackLost += o.StackLost
	return w
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
	s.RubyWalks = s.RubyWalks.Add(o.RubyWalks)
	s.PHPWalks = s.PHPWalks.Add(o.PHPWalks)
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
	s.RubyProcesses, s.PHPProcesses = o.RubyProcesses, o.PHPProcesses
	s.PythonVersions = o.PythonVersions
	return s
}
