package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Map types whose values are maps (uapi bpf.h).
const (
	bpfMapTypeArrayOfMaps = 12
	bpfMapTypeHashOfMaps  = 13
)

// bpfMemory is the kernel memory of a process's BPF maps.
type bpfMemory struct {
	maps      int    // maps it holds an fd of
	mapBytes  uint64 // their memlock
	inner     int    // maps inside those of them that hold maps
	innerByte uint64 // their memlock
}

func (m bpfMemory) total() uint64 { return m.mapBytes + m.innerByte }

// readBPFMemory sums the memlock of the maps process pid holds an fd of
// (each once), and of the maps stored in those that hold maps: the unwind
// tables, whose fds the collector closes once a table is in its array.
func readBPFMemory(pid int) (bpfMemory, error) {
	var m bpfMemory
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return m, err
	}
	if len(fds) == 0 {
		return m, fmt.Errorf("no fds in /proc/%d/fd (exited?)", pid)
	}
	seen := map[uint64]bool{}
	var outer []uint64
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil || target != "anon_inode:bpf-map" {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, filepath.Base(fd)))
		if err != nil {
			continue
		}
		id, mem, ok := parseFdinfoMap(data)
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		m.maps++
		m.mapBytes += mem
		if t, _ := fdinfoField(data, "map_type"); t == bpfMapTypeArrayOfMaps || t == bpfMapTypeHashOfMaps {
			outer = append(outer, id)
		}
	}
	var errs []error
	for _, id := range outer {
		n, bytes, err := innerMapMemory(ebpf.MapID(id), seen)
		m.inner += n
		m.innerByte += bytes
		errs = append(errs, err)
	}
	return m, errors.Join(errs...)
}

// innerMapMemory sums the memlock of the maps stored in map id, those not
// in seen (which it adds them to).
func innerMapMemory(id ebpf.MapID, seen map[uint64]bool) (n int, bytes uint64, err error) {
	outer, err := ebpf.NewMapFromID(id)
	if err != nil {
		return 0, 0, fmt.Errorf("open map %d: %w", id, err)
	}
	defer outer.Close()
	var key, inner uint32
	next := outer.Iterate()
	for next.Next(&key, &inner) {
		if seen[uint64(inner)] {
			continue
		}
		seen[uint64(inner)] = true
		m, err := ebpf.NewMapFromID(ebpf.MapID(inner))
		if err != nil {
			continue // freed meanwhile
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			continue
		}
		mem, _ := info.Memlock()
		n++
		bytes += mem
	}
	return n, bytes, next.Err()
}

// fdinfoField returns the number of field key of an fdinfo file.
func fdinfoField(data []byte, key string) (uint64, bool) {
	for line := range strings.Lines(string(data)) {
		k, v, found := strings.Cut(line, ":")
		if !found || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}
