//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// FaultsEnv chooses the fault scenarios' length: "short" (CI: each within
// about 3 minutes) or "full" (make faults: the README's Reliability
// figures). Unset, the scenarios skip: make test does not run them.
const FaultsEnv = "BPFPROFILER_FAULTS"

// faultLength returns the collector binary and whether the full version
// of a fault scenario runs; it skips the test when FaultsEnv is unset.
func faultLength(t *testing.T) (bin string, full bool) {
	t.Helper()
	switch os.Getenv(FaultsEnv) {
	case "full":
		full = true
	case "short":
	case "":
		t.Skipf("a fault scenario: make faults runs it (%s=short or full)", FaultsEnv)
	default:
		t.Fatalf("%s=%q: want short or full", FaultsEnv, os.Getenv(FaultsEnv))
	}
	return collectorBinary(t), full
}

// faultFigure logs a measured figure of a fault scenario in one greppable
// form ("FIGURE <test>: ..."), which make faults prints as its summary.
func faultFigure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

// kernelObjects are the node's BPF programs, maps and links by id, read
// through the kernel's id iterators, with the memory its maps charge.
type kernelObjects struct {
	progs, maps, links map[uint32]string // id -> name (links: type)
	mapBytes           map[uint32]uint64 // map id -> memlock
}

func readKernelObjects() (kernelObjects, error) {
	o := kernelObjects{progs: map[uint32]string{}, maps: map[uint32]string{},
		links: map[uint32]string{}, mapBytes: map[uint32]uint64{}}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		} else if err != nil {
			return o, fmt.Errorf("next program id: %w", err)
		}
		id = next
		o.progs[uint32(id)] = programName(id)
	}
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		} else if err != nil {
			return o, fmt.Errorf("next map id: %w", err)
		}
		id = next
		o.maps[uint32(id)], o.mapBytes[uint32(id)] = mapNameAndBytes(id)
	}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		kind := "?"
		if info, err := it.Link.Info(); err == nil {
			kind = fmt.Sprint(info.Type)
		}
		o.links[uint32(it.ID)] = kind
	}
	return o, it.Err()
}

// programName is the program's name, "" when it went away meanwhile.
func programName(id ebpf.ProgramID) string {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}

func mapNameAndBytes(id ebpf.MapID) (string, uint64) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return "", 0
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return "", 0
	}
	b, _ := info.Memlock()
	return info.Name, b
}

// since returns the objects of o that base does not have: what was created
// in between.
func (o kernelObjects) since(base kernelObjects) kernelObjects {
	d := kernelObjects{progs: map[uint32]string{}, maps: map[uint32]string{},
		links: map[uint32]string{}, mapBytes: map[uint32]uint64{}}
	for id, n := range o.progs {
		if _, ok := base.progs[id]; !ok {
			d.progs[id] = n
		}
	}
	for id, n := range o.maps {
		if _, ok := base.maps[id]; !ok {
			d.maps[id], d.mapBytes[id] = n, o.mapBytes[id]
		}
	}
	for id, n := range o.links {
		if _, ok := base.links[id]; !ok {
			d.links[id] = n
		}
	}
	return d
}

func (o kernelObjects) empty() bool {
	return len(o.progs) == 0 && len(o.maps) == 0 && len(o.links) == 0
}

func (o kernelObjects) bytes() uint64 {
	var n uint64
	for _, b := range o.mapBytes {
		n += b
	}
	return n
}

func (o kernelObjects) String() string {
	names := func(m map[uint32]string) string {
		var s []string
		for id, n := range m {
			s = append(s, fmt.Sprintf("%d:%s", id, n))
		}
		return strings.Join(s, " ")
	}
	return fmt.Sprintf("%d programs [%s], %d maps [%s] (%d bytes), %d links [%s]",
		len(o.progs), names(o.progs), len(o.maps), names(o.maps), o.bytes(), len(o.links), names(o.links))
}

// perfEventFiles counts the perf event files every process on the node holds
// open: a profiler's events end with the last file of them.
func perfEventFiles() int {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}
