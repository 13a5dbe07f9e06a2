//go:build !linux

package unwinder

import (
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Tables are the unwind tables the BPF programs share; Linux only.
type Tables struct{}

// OpenTables fails: there is no BPF here.
func OpenTables(procfs.FS, uint32) (*Tables, error) { return nil, errors.ErrUnsupported }

// Close does nothing.
func (*Tables) Close() error { return nil }

// Loaded says no: there are no tables.
func (*Tables) Loaded(uint32) bool { return false }

// Stats returns zero counters.
func (*Tables) Stats() Stats { return Stats{} }
