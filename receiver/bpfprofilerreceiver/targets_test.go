package bpfprofilerreceiver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func TestTargetFilter(t *testing.T) {
	cid := "4f2a9c1b7d3e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	pod := report.Identity{ExePath: "/usr/bin/python3.12", Attributes: map[string]any{
		"container.id": cid,
		"k8s.pod.uid":  "0b5c1a7e-3f2d-4c8e-9a61-1234567890ab",
	}}
	host := report.Identity{ExePath: "/usr/sbin/sshd", Attributes: map[string]any{}}
	tests := []struct {
		name     string
		targets  TargetsConfig
		pod, hst bool
	}{
		{name: "empty keeps everything", pod: true, hst: true},
		{name: "full container id", targets: TargetsConfig{ContainerIDs: []string{cid}}, pod: true},
		{name: "container id prefix", targets: TargetsConfig{ContainerIDs: []string{cid[:12]}}, pod: true},
		{name: "other container", targets: TargetsConfig{ContainerIDs: []string{"aaaaaaaaaaaa"}}},
		{name: "pod uid", targets: TargetsConfig{K8sPodUIDs: []string{"0b5c1a7e-3f2d-4c8e-9a61-1234567890ab"}}, pod: true},
		{name: "executable", targets: TargetsConfig{Executables: []string{"sshd$"}}, hst: true},
		{name: "both lists must match", targets: TargetsConfig{ContainerIDs: []string{cid}, Executables: []string{"sshd$"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFilter(tt.targets)
			assert.Equal(t, tt.pod, f.keep(pod))
			assert.Equal(t, tt.hst, f.keep(host))
		})
	}
}
