package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// DaemonSetMemory is the memory the DaemonSet (deploy/kubernetes/
// daemonset.yaml) gives its collector: the container's limit, and the
// GOMEMLIMIT it sets below it (the cgroup also holds the BPF maps and
// the pages of the files the collector maps).
type DaemonSetMemory struct {
	Limit      uint64 // bytes: resources.limits.memory
	GoMemLimit string // the GOMEMLIMIT value, as the Go runtime reads it
}

// ShippedDaemonSetMemory returns the DaemonSet's memory settings.
func ShippedDaemonSetMemory(t testing.TB) DaemonSetMemory {
	t.Helper()
	return readShipped(t, ReadDaemonSetMemory)
}

// ReadDaemonSetMemory reads the memory settings of deploy/kubernetes/
// daemonset.yaml under the repository root.
func ReadDaemonSetMemory(root string) (DaemonSetMemory, error) {
	file := filepath.Join(root, "deploy", "kubernetes", "daemonset.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		return DaemonSetMemory{}, err
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Env []struct {
							Name  string `yaml:"name"`
							Value string `yaml:"value"`
						} `yaml:"env"`
						Resources struct {
							Limits map[string]string `yaml:"limits"`
						} `yaml:"resources"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &ds); err != nil {
		return DaemonSetMemory{}, fmt.Errorf("%s: %w", file, err)
	}
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		return DaemonSetMemory{}, fmt.Errorf("%s: %d containers, want 1", file, len(cs))
	}
	limit, err := parseQuantity(cs[0].Resources.Limits["memory"])
	if err != nil {
		return DaemonSetMemory{}, fmt.Errorf("%s: resources.limits.memory: %w", file, err)
	}
	m := DaemonSetMemory{Limit: limit}
	for _, e := range cs[0].Env {
		if e.Name == "GOMEMLIMIT" {
			m.GoMemLimit = e.Value
		}
	}
	if m.GoMemLimit == "" {
		return m, fmt.Errorf("%s: no GOMEMLIMIT value in the container's env", file)
	}
	return m, nil
}

// parseQuantity reads a Kubernetes memory quantity in binary units (Ki,
// Mi, Gi) or bytes.
func parseQuantity(q string) (uint64, error) {
	for i, unit := range []string{"Ki", "Mi", "Gi"} {
		if n, ok := strings.CutSuffix(q, unit); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			return v << (10 * (i + 1)), err
		}
	}
	return strconv.ParseUint(q, 10, 64)
}

// GoMemLimitBytes is GoMemLimit in bytes.
func (m DaemonSetMemory) GoMemLimitBytes() (uint64, error) { return parseGoMemLimit(m.GoMemLimit) }

// parseGoMemLimit reads a GOMEMLIMIT value: bytes, or a number with B,
// KiB, MiB, GiB or TiB, as runtime/debug documents it.
func parseGoMemLimit(v string) (uint64, error) {
	for i, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if n, ok := strings.CutSuffix(v, unit); ok {
			b, err := strconv.ParseUint(n, 10, 64)
			return b << (10 * (i + 1)), err
		}
	}
	return strconv.ParseUint(strings.TrimSuffix(v, "B"), 10, 64)
}
