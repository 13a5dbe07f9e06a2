package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// CgroupV2Root is where this machine mounts cgroup v2 (hybrid layout).
const CgroupV2Root = "/sys/fs/cgroup/unified"

// FakePod describes a container the way a kubelet with the systemd cgroup
// driver and containerd would lay it out.
type FakePod struct {
	UID           string // with dashes
	Name          string
	Namespace     string
	ContainerName string
	ContainerID   string // 64 hex
	HostRoot      string // temporary host root holding the bundle config.json
}

// NewFakePod returns a pod with fresh ids whose containerd bundle
// config.json is written under a temporary host root.
func NewFakePod(t testing.TB, name string) FakePod {
	t.Helper()
	p := FakePod{
		UID:           "0b5c1a7e-3f2d-4c8e-9a61-" + fmt.Sprintf("%012x", os.Getpid()),
		Name:          name,
		Namespace:     "payments",
		ContainerName: name + "-app",
		ContainerID:   strings.Repeat(fmt.Sprintf("%08x", os.Getpid()), 8),
		HostRoot:      t.TempDir(),
	}
	bundle := filepath.Join(p.HostRoot, "run/containerd/io.containerd.runtime.v2.task/k8s.io", p.ContainerID)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{"annotations": map[string]string{
		"io.kubernetes.cri.container-type":    "container",
		"io.kubernetes.cri.container-name":    p.ContainerName,
		"io.kubernetes.cri.sandbox-name":      p.Name,
		"io.kubernetes.cri.sandbox-namespace": p.Namespace,
		"io.kubernetes.cri.sandbox-uid":       p.UID,
	}}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// CgroupPath is the pod's container cgroup relative to the v2 root, as the
// systemd driver names it for a burstable pod.
func (p FakePod) CgroupPath() string {
	uid := strings.ReplaceAll(p.UID, "-", "_")
	return filepath.Join("kubepods.slice", "kubepods-burstable.slice",
		"kubepods-burstable-pod"+uid+".slice", "cri-containerd-"+p.ContainerID+".scope")
}

// MoveInto creates the pod's cgroup hierarchy under the v2 mount, moves pid
// into the container's leaf, and at cleanup moves it back and removes the
// cgroups it created.
func (p FakePod) MoveInto(t testing.TB, pid int) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(CgroupV2Root, "cgroup.procs")); err != nil {
		t.Fatalf("cgroup v2 is not mounted at %s: %v", CgroupV2Root, err)
	}
	var created []string
	dir := CgroupV2Root
	for _, part := range strings.Split(p.CgroupPath(), "/") {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err == nil {
			created = append(created, dir)
		} else if !os.IsExist(err) {
			t.Fatalf("create cgroup: %v", err)
		}
	}
	t.Cleanup(func() {
		// Move the process out (it may be gone already), then remove the
		// cgroups innermost first.
		_ = os.WriteFile(filepath.Join(CgroupV2Root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.Remove(created[i]); err != nil {
				t.Logf("remove cgroup %s: %v", created[i], err)
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, dir, err)
	}
}
