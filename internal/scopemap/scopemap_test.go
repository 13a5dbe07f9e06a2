package scopemap

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Without a map to share, a collection keeps a one-entry map of its own and
// reads no scopes; with one, it reads the shared map.
func TestShare(t *testing.T) {
	spec, err := bpf.LoadCpu()
	require.NoError(t, err)
	opts, err := Share(spec, nil, nil)
	require.NoError(t, err)
	require.Empty(t, opts.MapReplacements)
	require.EqualValues(t, 1, spec.Maps[threadsName].MaxEntries)
	require.EqualValues(t, 1, spec.Maps[goroutinesName].MaxEntries)

	_, err = Share(&ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}}, nil, nil)
	require.ErrorContains(t, err, "no open_scopes map")
}

func TestShareLoads(t *testing.T) {
	testutil.RequireBPF(t)
	m, err := New()
	require.NoError(t, err)
	defer m.Close()
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"cpu": bpf.LoadCpu, "offcpu_switchout": bpf.LoadOffcpuSwitchout} {
		spec, err := load()
		require.NoError(t, err)
		prior := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
		opts, err := Share(spec, m, prior)
		require.NoError(t, err)
		require.Same(t, prior, opts, "%s: the options given are extended", name)
		require.Same(t, m.Threads, opts.MapReplacements[threadsName])
		require.Same(t, m.Goroutines, opts.MapReplacements[goroutinesName])
		var linked uint32
		require.NoError(t, spec.Variables["link_scopes"].Get(&linked))
		require.EqualValues(t, 1, linked, name)
		coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
		require.NoError(t, err, name)
		coll.Close()
	}
}
