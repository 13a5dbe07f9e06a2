package probes

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// fileID identifies a file independently of the path a process sees it by.
type fileID struct {
	dev   uint64 // major<<32 | minor
	inode uint64
}

// attempt is one probe on one file.
type attempt struct {
	file  fileID
	probe int
}

// attempts decides which (file, probe) pairs a scan tries. An outcome that
// cannot change for the same file (attached, a symbol missing, a Go binary
// refused) is final; a failure (permission, a transient attach error) is
// tried again from the next rescan on, so exec scans do not reread the file
// in between, and is warned about once.
type attempts struct {
	final  map[attempt]bool
	failed map[attempt]bool // since the last rescan
	warned map[attempt]bool
}

func newAttempts() *attempts {
	return &attempts{final: map[attempt]bool{}, failed: map[attempt]bool{}, warned: map[attempt]bool{}}
}

// due reports whether a scan should try k.
func (s *attempts) due(k attempt) bool { return !s.final[k] && !s.failed[k] }

// finish records a final outcome of k.
func (s *attempts) finish(k attempt) {
	s.final[k] = true
	delete(s.failed, k)
}

// fail records a failure of k; it reports whether this is k's first
// failure, the one to warn about.
func (s *attempts) fail(k attempt) (first bool) {
	s.failed[k] = true
	first = !s.warned[k]
	s.warned[k] = true
	return first
}

// rescan makes every failed pair due again.
func (s *attempts) rescan() { clear(s.failed) }

// failing counts the pairs whose last attempt failed.
func (s *attempts) failing() int {
	n := 0
	for k := range s.warned {
		if !s.final[k] {
			n++
		}
	}
	return n
}

// transientReadError reports whether reading a file's symbols failed in a
// system call (permission, I/O, no file descriptor left), which a later scan
// may not hit, rather than on the file's content, which stays as it is.
// retryRead reports whether reading a probed file's symbols may succeed at
// the next rescan: a transient error, or a file that did not answer in time;
// not a malformed file, nor one refused for what it is (procfs.RefusedError).
func retryRead(err error) bool {
	switch procfs.RefusalReason(err) {
	case "":
		return transientReadError(err)
	case procfs.ReasonTimeout, procfs.ReasonStuck, procfs.ReasonBusy:
		return true
	default:
		return false
	}
}

func transientReadError(err error) bool {
	var pe *fs.PathError
	var errno syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &errno)
}
