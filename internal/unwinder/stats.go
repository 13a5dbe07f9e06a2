package unwinder

import (
	"errors"
	"time"
)

// Stats are the loader's counters.
type Stats struct {
	Processes    uint64 // processes with mappings loaded
	Tables       uint64 // files with a table in the rows array
	RowsUsed     uint64 // rows of the array in use
	RowCapacity  uint64 // rows the array holds
	NoCFI        uint64 // files read that have no CFI (walked with frame pointers)
	Failed       [numReasons]uint64
	MappingsFull uint64 // mapping entries refused: the LPM trie was full
	// ProcessErrors counts processes whose mappings could not be read
	// (most often: they exited before).
	ProcessErrors uint64
	BuildTime     time.Duration // spent building tables
}

// RowBytes is the size of one row in the kernel (struct unwind_row).
const RowBytes = 12

// Reason says why a file got no table; its mappings are walked with frame
// pointers.
type Reason int

const (
	ReasonOpen      Reason = iota // the file could not be opened (refused, vanished)
	ReasonBuild                   // the ELF or its CFI could not be read
	ReasonTooLarge                // more rows than the BPF search covers
	ReasonSpaceFull               // no room left in the rows array
	numReasons
)

// String is the reason's telemetry value.
func (r Reason) String() string {
	return [...]string{"open_failed", "malformed", "too_large", "space_full"}[r]
}

// Reasons lists every Reason.
func Reasons() []Reason { return []Reason{ReasonOpen, ReasonBuild, ReasonTooLarge, ReasonSpaceFull} }

// Failure is why one file got no table.
type Failure struct {
	Reason Reason
	Err    error
}

func (f *Failure) Error() string { return f.Reason.String() + ": " + f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

func (s *Stats) countFailure(err error) {
	var f *Failure
	if errors.As(err, &f) {
		s.Failed[f.Reason]++
		return
	}
	s.Failed[ReasonBuild]++
}
