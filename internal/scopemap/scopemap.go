// Package scopemap shares the maps of open probe scopes (bpf/scopes.h)
// between the probe programs, which write them, and the CPU and off-CPU
// programs, which put the scope a thread (or the goroutine it runs) is
// inside into the key of its samples.
package scopemap

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
)

// The maps' names in every collection that includes bpf/scopes.h.
const (
	threadsName    = bpf.ProbeMapOpenScopes
	goroutinesName = bpf.ProbeMapGoOpenScopes
)

// GoroutineBit marks a sample's scope (stack_key.scope_probe) as a
// goroutine's: its record may name another thread than the sample.
const GoroutineBit = 0x80000000

// Maps are the open scopes of threads (by host thread id) and of
// goroutines (by host tgid and g).
type Maps struct {
	Threads, Goroutines *ebpf.Map
}

// New creates the maps as the probe collection declares them.
func New() (*Maps, error) {
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; a failure
	// to raise it is explained if a map cannot be created.
	_ = memlock.Raise()
	spec, err := bpf.LoadProbe()
	if err != nil {
		return nil, fmt.Errorf("load probe BPF spec: %w", err)
	}
	m := &Maps{}
	for _, s := range []struct {
		name string
		to   **ebpf.Map
	}{{threadsName, &m.Threads}, {goroutinesName, &m.Goroutines}} {
		ms, ok := spec.Maps[s.name]
		if !ok {
			m.Close()
			return nil, errors.New("the probe BPF collection has no " + s.name + " map")
		}
		if *s.to, err = ebpf.NewMap(ms); err != nil {
			m.Close()
			return nil, fmt.Errorf("create the %s map: %w", s.name, memlock.Explain(err))
		}
	}
	return m, nil
}

// Close closes the maps; nil: nothing to close.
func (m *Maps) Close() error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, x := range []*ebpf.Map{m.Threads, m.Goroutines} {
		if x != nil {
			errs = append(errs, x.Close())
		}
	}
	return errors.Join(errs...)
}

// Share readies spec, a collection that includes bpf/scopes.h, to load with
// open (nil: its programs read no scopes, and its own maps take one entry
// each), adding the replacements to opts (nil: new options); it returns the
// options to load with.
func Share(spec *ebpf.CollectionSpec, open *Maps, opts *ebpf.CollectionOptions) (*ebpf.CollectionOptions, error) {
	names := []string{threadsName, goroutinesName}
	for _, name := range names {
		if _, ok := spec.Maps[name]; !ok {
			return nil, errors.New("BPF collection has no " + name + " map")
		}
	}
	if opts == nil {
		opts = &ebpf.CollectionOptions{}
	}
	if open == nil {
		for _, name := range names {
			spec.Maps[name].MaxEntries = 1
		}
		return opts, nil
	}
	if v, ok := spec.Variables["link_scopes"]; ok {
		if err := v.Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("set link_scopes: %w", err)
		}
	}
	if opts.MapReplacements == nil {
		opts.MapReplacements = map[string]*ebpf.Map{}
	}
	opts.MapReplacements[threadsName] = open.Threads
	opts.MapReplacements[goroutinesName] = open.Goroutines
	return opts, nil
}
