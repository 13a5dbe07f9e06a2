package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
)

// TestProbeSpecLayout checks, without loading anything into the kernel, that
// the committed probe object matches the Go types internal/probes writes and
// reads (explicit padding only).
func TestProbeSpecLayout(t *testing.T) {
	spec, err := LoadProbe()
	if err != nil {
		t.Fatal(err)
	}
	const maxProbes = 64
	tests := []struct {
		name       string
		typ        ebpf.MapType
		keySize    uintptr
		valueSize  uintptr
		maxEntries uint32
	}{
		{ProbeMapProbeConfigs, ebpf.Array, 4, unsafe.Sizeof(ProbeProbeConfig{}), maxProbes},
		{ProbeMapStats, ebpf.PerCPUArray, 4, unsafe.Sizeof(ProbeProbeStats{}), 1},
		{ProbeMapDrops, ebpf.PerCPUArray, 4, unsafe.Sizeof(ProbeProbeDrops{}), maxProbes},
		{ProbeMapRateTat, ebpf.Array, 4, 8, maxProbes},
		{ProbeMapEntryStacks, ebpf.LRUHash, 16, 8 + stackDepth*8, 4096},
		{ProbeMapGoProbeFiles, ebpf.Array, 4, 8, 1024},
	}
	for _, tt := range tests {
		m, ok := spec.Maps[tt.name]
		if !ok {
			t.Errorf("map %s missing", tt.name)
			continue
		}
		if m.Type != tt.typ || uintptr(m.KeySize) != tt.keySize || uintptr(m.ValueSize) != tt.valueSize || m.MaxEntries != tt.maxEntries {
			t.Errorf("map %s: type %v key %d value %d entries %d, want %v key %d value %d entries %d",
				tt.name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, tt.typ, tt.keySize, tt.valueSize, tt.maxEntries)
		}
	}
	sizes := []struct {
		name      string
		got, want uintptr
	}{
		{"probe_config", unsafe.Sizeof(ProbeProbeConfig{}), 8 + 4 + 4 + 8 + 8 + 4 + 4},
		{"probe_stats", unsafe.Sizeof(ProbeProbeStats{}), 4 * 8},
		{"probe_drops", unsafe.Sizeof(ProbeProbeDrops{}), 3 * 8},
		{"probe_record", unsafe.Sizeof(ProbeProbeRecord{}), 8 + 8 + 4 + 4 + 4 + 16 + 4 + 4 + 4},
		{"probe_stack_record", unsafe.Sizeof(ProbeProbeStackRecord{}), unsafe.Sizeof(ProbeProbeRecord{}) + stackDepth*8},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("%s is %d bytes, want %d", s.name, s.got, s.want)
		}
	}
}

// TestOpenScopesMapsAlike checks that every collection declares open_scopes
// and go_open_scopes (bpf/scopes.h) alike: maps created from the probe
// collection's spec replace the others' at load.
func TestOpenScopesMapsAlike(t *testing.T) {
	probe, err := LoadProbe()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name    string
		keySize uint32
	}{{ProbeMapOpenScopes, 4}, {ProbeMapGoOpenScopes, 16}} {
		want := probe.Maps[m.name]
		if want == nil || want.Type != ebpf.LRUHash || want.KeySize != m.keySize || want.ValueSize != 16 || want.MaxEntries != 65536 {
			t.Fatalf("probe %s: %+v", m.name, want)
		}
		for name, load := range map[string]func() (*ebpf.CollectionSpec, error){
			"cpu": LoadCpu, "offcpu": LoadOffcpu, "offcpu_switchout": LoadOffcpuSwitchout,
		} {
			spec, err := load()
			if err != nil {
				t.Fatal(err)
			}
			got := spec.Maps[m.name]
			if got == nil || got.Type != want.Type || got.KeySize != want.KeySize || got.ValueSize != want.ValueSize ||
				got.MaxEntries != want.MaxEntries || got.Flags != want.Flags {
				t.Errorf("%s %s %+v, probe's %+v", name, m.name, got, want)
			}
			if _, ok := spec.Variables["link_scopes"]; !ok {
				t.Errorf("%s has no link_scopes variable", name)
			}
		}
	}
}
