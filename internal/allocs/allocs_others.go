//go:build !linux

package allocs

import "errors"

// Manager is not available off Linux.
type Manager struct{}

// Open fails off Linux.
func Open(Options) (*Manager, error) { return nil, errors.New("allocation profiles need Linux") }

// Drain returns nothing.
func (*Manager) Drain() Window { return Window{} }

// Stats returns nothing.
func (*Manager) Stats() Stats { return Stats{} }

// Close does nothing.
func (*Manager) Close() error { return nil }
