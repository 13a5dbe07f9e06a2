package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MemoryCgroup is a memory cgroup of its own with a limit, as a DaemonSet's
// container has: cgroup v1's memory controller where the machine mounts it
// (hybrid hierarchies), else cgroup v2's. Both charge BPF maps to the cgroup
// of the process that created them (kernel 5.11 and later).
type MemoryCgroup struct {
	Dir string
	V1  bool
}

// NewMemoryCgroup creates the cgroup name with a memory limit of limit
// bytes. Remove it once its processes have exited.
func NewMemoryCgroup(name string, limit uint64) (*MemoryCgroup, error) {
	cg := &MemoryCgroup{Dir: filepath.Join("/sys/fs/cgroup/memory", name), V1: true}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		cg = &MemoryCgroup{Dir: filepath.Join("/sys/fs/cgroup", name)}
		if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0o644); err != nil {
			return nil, fmt.Errorf("enable the memory controller for cgroup v2's children: %w", err)
		}
	}
	if err := os.Mkdir(cg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create memory cgroup: %w", err)
	}
	file := "memory.max"
	if cg.V1 {
		file = "memory.limit_in_bytes"
	}
	if err := os.WriteFile(filepath.Join(cg.Dir, file), []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
		_ = os.Remove(cg.Dir)
		return nil, fmt.Errorf("set %s: %w", file, err)
	}
	return cg, nil
}

// Remove removes the cgroup, retrying until timeout: it is empty once its
// processes exited, and their BPF maps are freed a little later.
func (cg *MemoryCgroup) Remove(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := os.Remove(cg.Dir)
		if err == nil || os.IsNotExist(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", cg.Dir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Wrap returns argv run inside the cgroup: a shell moves itself in, then
// execs it (the same pid).
func (cg *MemoryCgroup) Wrap(argv ...string) []string {
	return append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg.Dir}, argv...)
}

// read returns the number in the cgroup's file v1 or v2 (by hierarchy), 0
// when it cannot be read.
func (cg *MemoryCgroup) read(v1, v2 string) uint64 {
	name := v2
	if cg.V1 {
		name = v1
	}
	b, err := os.ReadFile(filepath.Join(cg.Dir, name))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// Usage is the memory charged to the cgroup now, BPF maps included.
func (cg *MemoryCgroup) Usage() uint64 { return cg.read("memory.usage_in_bytes", "memory.current") }

// Peak is the most memory charged to the cgroup so far.
func (cg *MemoryCgroup) Peak() uint64 { return cg.read("memory.max_usage_in_bytes", "memory.peak") }

// PageCache is the file pages charged to the cgroup (files it read or
// wrote), which the kernel reclaims before it kills for memory.
func (cg *MemoryCgroup) PageCache() uint64 {
	name, key := "memory.stat", "file"
	if cg.V1 {
		key = "cache"
	}
	b, _ := os.ReadFile(filepath.Join(cg.Dir, name))
	return ParseMemoryStat(b, key)
}

// ParseMemoryStat returns the value of key in a memory.stat file, 0 when it
// has none.
func ParseMemoryStat(data []byte, key string) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// OOMKills counts the processes of the cgroup the kernel killed for memory.
func (cg *MemoryCgroup) OOMKills() uint64 {
	name := "memory.events"
	if cg.V1 {
		name = "memory.oom_control"
	}
	b, _ := os.ReadFile(filepath.Join(cg.Dir, name))
	return ParseOOMKills(b)
}

// ParseOOMKills returns the oom_kill count of a cgroup v1 memory.oom_control
// or v2 memory.events file, 0 when it has none.
func ParseOOMKills(data []byte) uint64 {
	return ParseMemoryStat(data, "oom_kill")
}
