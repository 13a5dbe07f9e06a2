//go:build !linux

package probes

import (
	"context"
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Manager is only available on Linux.
type Manager struct{}

var errNotLinux = errors.New("probes are only supported on Linux")

// Open returns an error: uprobes need Linux.
func Open(specs []Spec, opts Options) (*Manager, error) { return nil, errNotLinux }

// Run returns an error: uprobes need Linux.
func (m *Manager) Run(ctx context.Context, deliver func([]capture.RawScope)) error {
	return errNotLinux
}

// Stats returns zero counters.
func (m *Manager) Stats() Stats { return Stats{} }

// Close does nothing.
func (m *Manager) Close() error { return nil }
