//go:build !linux

package offcpu

import (
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

var errNotLinux = errors.New("bpfprofiler off-CPU profiling is only supported on Linux")

// Tracer measures off-CPU time with BPF; only available on Linux.
type Tracer struct{}

// Open always fails: BPF tracing is only supported on Linux.
func Open(opts Options) (*Tracer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

// Drain always fails on this platform.
func (t *Tracer) Drain() ([]capture.RawStack, capture.Stats, error) {
	return nil, capture.Stats{}, errNotLinux
}

// Mechanism names no mechanism on this platform.
func (t *Tracer) Mechanism() string { return "" }

// NewProcesses announces nothing on this platform.
func (t *Tracer) NewProcesses() <-chan capture.ProcessEvent { return nil }

// SetTargets always fails on this platform.
func (t *Tracer) SetTargets([]uint32) error { return errNotLinux }

// Close does nothing on this platform.
func (t *Tracer) Close() error { return nil }
