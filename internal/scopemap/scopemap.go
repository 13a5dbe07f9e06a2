// Package scopemap shares the map of open probe scopes (bpf/scopes.h)
// between the probe programs, which write it, and the CPU and off-CPU
// programs, which put the scope a thread is inside into the key of its
// samples.
package scopemap

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
)

// mapName is the map's name in every collection that includes bpf/scopes.h.
const mapName = bpf.ProbeMapOpenScopes

// New creates the map as the probe collection declares it.
func New() (*ebpf.Map, error) {
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; a failure
	// to raise it is explained if the map cannot be created.
	_ = memlock.Raise()
	spec, err := bpf.LoadProbe()
	if err != nil {
		return nil, fmt.Errorf("load probe BPF spec: %w", err)
	}
	ms, ok := spec.Maps[mapName]
	if !ok {
		return nil, errors.New("the probe BPF collection has no " + mapName + " map")
	}
	m, err := ebpf.NewMap(ms)
	if err != nil {
		return nil, fmt.Errorf("create the %s map: %w", mapName, memlock.Explain(err))
	}
	return m, nil
}

// Share readies spec, a collection that includes bpf/scopes.h, to load with
// open (nil: its programs read no scopes, and its own map takes one entry),
// adding the replacement to opts (nil: new options); it returns the options
// to load with.
func Share(spec *ebpf.CollectionSpec, open *ebpf.Map, opts *ebpf.CollectionOptions) (*ebpf.CollectionOptions, error) {
	ms, ok := spec.Maps[mapName]
	if !ok {
		return nil, errors.New("BPF collection has no " + mapName + " map")
	}
	if opts == nil {
		opts = &ebpf.CollectionOptions{}
	}
	if open == nil {
		ms.MaxEntries = 1
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
	opts.MapReplacements[mapName] = open
	return opts, nil
}
