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
		{"probe_config", unsafe.Sizeof(ProbeProbeConfig{}), 8 + 4 + 4 + 8 + 8},
		{"probe_stats", unsafe.Sizeof(ProbeProbeStats{}), 2 * 8},
		{"probe_drops", unsafe.Sizeof(ProbeProbeDrops{}), 2 * 8},
		{"probe_record", unsafe.Sizeof(ProbeProbeRecord{}), 8 + 8 + 4 + 4 + 4 + 16 + 4},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("%s is %d bytes, want %d", s.name, s.got, s.want)
		}
	}
}
