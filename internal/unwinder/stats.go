package unwinder

import (
	"errors"
	"fmt"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Stats are the loader's counters.
type Stats struct {
	Processes    uint64                // processes with mappings loaded
	Tables       uint64                // files with a table loaded
	RowsUsed     uint64                // rows charged for the tables loaded (with a mappable table's page rounding)
	RowCapacity  uint64                // rows the memory budget allows
	NoCFI        uint64                // files read that have no CFI (walked with frame pointers)
	Failed       capture.TableFailures // files left without a table, by reason
	MappingsFull uint64                // mapping entries refused: the LPM trie was full
	BuildTime    time.Duration         // spent building tables
	// ProcessErrors counts processes whose mappings could not be read
	// (most often: they exited before).
	ProcessErrors uint64
	// Rescans counts the kernel's requests to read a process's mappings
	// again, Reloads those that found them changed; Prunes the checks of
	// every process after lost announcements.
	Rescans, Reloads, Prunes uint64
	// RescansHeldBack counts the kernel's requests dropped because the
	// process's previous rescans found nothing new (rescanBackoffs).
	RescansHeldBack uint64
	// SkippedLoads counts processes that exited within loadDelay of their
	// announcement: nothing of theirs was read.
	SkippedLoads uint64
	// IdleTables is the tables no process maps, kept for a process that
	// maps their file again (IdleReused) until they expire or their rows
	// are needed (IdleEvicted).
	IdleTables, IdleReused, IdleEvicted uint64
	// ColdEvicted counts tables in use that no walk had used for
	// coldTableAge, evicted for the rows of a new table.
	ColdEvicted uint64
	// Runtimes count, by runtime name (internal/runtimes), what concerns
	// the runtimes' walkers.
	Runtimes map[string]RuntimeStats
	// ThreadContexts count the processes whose OpenTelemetry thread
	// context the samplers read (threadctx_linux.go).
	ThreadContexts ThreadContextStats
	// GoLabels count the Go executables whose goroutine labels the
	// samplers read.
	GoLabels GoLabelStats
}

// RuntimeStats are the loader's counters of one runtime: the processes
// whose frames its walker reads, the interpreter files of a version it
// cannot walk, and the processes its full map refused.
type RuntimeStats struct {
	Processes, Unsupported, MapFull uint64
	// Versions counts Processes by their interpreter's version, where it
	// tells it (runtimes.Versioned).
	Versions map[string]uint64
	// Errors are the distinct reasons of Unsupported not yet taken
	// (takeUnsupportedErrors), at most maxUnsupportedErrors.
	Errors []string
	// NotReady counts processes whose runtime never became ready for its
	// walker (a JVM whose code cache could not be read for a minute).
	NotReady uint64
}

// RowBytes is the size of one row in the kernel (struct unwind_row, the
// least an array element takes).
const RowBytes = 8

// Failure is why one file got no table.
type Failure struct {
	Reason capture.TableFailure
	Err    error
}

func (f *Failure) Error() string { return f.Reason.Reason() + ": " + f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// countFailure counts err under its reason and returns the reason.
func (s *Stats) countFailure(err error) capture.TableFailure {
	reason := capture.TableMalformed
	if f := (*Failure)(nil); errors.As(err, &f) {
		reason = f.Reason
	}
	s.Failed[reason]++
	return reason
}

// mib is rows' kernel memory in MiB.
func mib(rows uint64) float64 { return float64(rows*RowBytes) / (1 << 20) }

// failureNotes keeps the first failure of each reason for the log: one
// line per reason in the loader's life, the others only counted.
type failureNotes struct {
	noted   map[capture.TableFailure]bool // the reason's first was kept
	pending []string
}

// note keeps err, the failure of the file at path, when it is the first
// of its reason.
func (n *failureNotes) note(reason capture.TableFailure, path string, err error) {
	if !n.noted[reason] {
		if n.noted == nil {
			n.noted = map[capture.TableFailure]bool{}
		}
		n.noted[reason] = true
		n.pending = append(n.pending, fmt.Sprintf("%s: %v", path, err))
	}
}

// take returns the notes kept since the previous take.
func (n *failureNotes) take() []string {
	out := n.pending
	n.pending = nil
	return out
}
