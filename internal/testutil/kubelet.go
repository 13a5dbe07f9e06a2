package testutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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
	p, err := WriteFakePod(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteFakePod returns a pod with fresh ids whose containerd bundle
// config.json is written under hostRoot.
func WriteFakePod(hostRoot, name string) (FakePod, error) {
	p := FakePod{
		UID:           "0b5c1a7e-3f2d-4c8e-9a61-" + fmt.Sprintf("%012x", os.Getpid()),
		Name:          name,
		Namespace:     "payments",
		ContainerName: name + "-app",
		ContainerID:   strings.Repeat(fmt.Sprintf("%08x", os.Getpid()), 8),
		HostRoot:      hostRoot,
	}
	bundle := filepath.Join(p.HostRoot, "run/containerd/io.containerd.runtime.v2.task/k8s.io", p.ContainerID)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return p, err
	}
	spec := map[string]any{"annotations": map[string]string{
		"io.kubernetes.cri.container-type":    "container",
		"io.kubernetes.cri.container-name":    p.ContainerName,
		"io.kubernetes.cri.sandbox-name":      p.Name,
		"io.kubernetes.cri.sandbox-namespace": p.Namespace,
		"io.kubernetes.cri.sandbox-uid":       p.UID,
	}}
	b, _ := json.Marshal(spec)
	return p, os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644)
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
	undo, err := p.Enter(pid)
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Log(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Enter creates the pod's cgroup hierarchy under the v2 mount and moves pid
// into the container's leaf. undo (never nil) moves it back and removes the
// cgroups Enter created.
func (p FakePod) Enter(pid int) (undo func() error, err error) {
	var created []string
	undo = func() error {
		// Move the process out (it may be gone already), then remove the
		// cgroups innermost first.
		_ = os.WriteFile(filepath.Join(CgroupV2Root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		var errs []error
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.Remove(created[i]); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", created[i], err))
			}
		}
		return errors.Join(errs...)
	}
	if _, err := os.Stat(filepath.Join(CgroupV2Root, "cgroup.procs")); err != nil {
		return undo, fmt.Errorf("cgroup v2 is not mounted at %s: %w", CgroupV2Root, err)
	}
	dir := CgroupV2Root
	for _, part := range strings.Split(p.CgroupPath(), "/") {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err == nil {
			created = append(created, dir)
		} else if !os.IsExist(err) {
			return undo, fmt.Errorf("create cgroup: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return undo, fmt.Errorf("move pid %d into %s: %w", pid, dir, err)
	}
	return undo, nil
}

// ShippedCollectorYAML returns the collector configuration the DaemonSet's
// ConfigMap (deploy/kubernetes/configmap.yaml) ships, as text.
func ShippedCollectorYAML(t testing.TB) string {
	t.Helper()
	return readShipped(t, ReadShippedCollectorYAML)
}

// readShipped reads what read finds under the repository root, failing
// the test when it cannot.
func readShipped[T any](t testing.TB, read func(root string) (T, error)) T {
	t.Helper()
	v, err := read(RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ReadShippedCollectorYAML returns the collector configuration of
// deploy/kubernetes/configmap.yaml under the repository root, as text.
func ReadShippedCollectorYAML(root string) (string, error) {
	file := filepath.Join(root, "deploy", "kubernetes", "configmap.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	text, ok := cm.Data["collector.yaml"]
	if !ok {
		return "", fmt.Errorf("%s: no data.collector.yaml", file)
	}
	return text, nil
}
