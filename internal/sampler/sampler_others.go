//go:build !linux

package sampler

import (
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

var errNotLinux = errors.New("bpfprofiler CPU sampler is only supported on Linux")

// Sampler samples on-CPU stacks with BPF; only available on Linux.
type Sampler struct{}

// Open always fails: BPF sampling is only supported on Linux.
func Open(opts Options) (*Sampler, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

// Drain always fails on this platform.
func (s *Sampler) Drain() ([]capture.RawStack, capture.Stats, error) {
	return nil, capture.Stats{}, errNotLinux
}

// SetTargets always fails on this platform.
func (s *Sampler) SetTargets([]uint32) error { return errNotLinux }

// NewProcesses returns nil on this platform (a nil channel never delivers).
func (s *Sampler) NewProcesses() <-chan capture.ProcessEvent { return nil }

// MapSizes returns zero sizes on this platform.
func (s *Sampler) MapSizes() MapSizes { return MapSizes{} }

// Close does nothing on this platform.
func (s *Sampler) Close() error { return nil }

// Mechanism is how the samples would be recorded.
func (s *Sampler) Mechanism() string { return Mechanism }
