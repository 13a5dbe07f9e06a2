package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// kernelMappingFile is the mapping file name of the core kernel image.
const kernelMappingFile = "[kernel.kallsyms]"

// ksym is one text symbol of /proc/kallsyms, 16 bytes: its name is a
// slice of kallsyms.names.
type ksym struct {
	addr    uint64
	nameOff uint32
	nameLen uint16 // kernel symbol names are shorter than 512 bytes
	module  int16  // index into kallsyms.modules; -1 for the core kernel
}

// kregion is the address range of the core kernel or of one module.
type kregion struct {
	start, limit uint64
	mapping      *report.Mapping
}

// kallsyms is a parsed /proc/kallsyms, sorted by address, with all names
// in one string.
type kallsyms struct {
	syms    []ksym
	names   string
	core    kregion
	modules []kregion
}

// maxKernelModules bounds the modules of a kallsyms (ksym.module is 16 bits).
const maxKernelModules = 1<<15 - 1

// Slack past the last known symbol of a region that is still attributed
// to it when no end marker is known.
const (
	coreSlack   = 1 << 20
	moduleSlack = 64 << 10
)

// parseKallsyms parses the content of /proc/kallsyms, keeping text symbols.
// Symbols with address zero (kptr_restrict, no CAP_SYSLOG) are dropped, so an
// unprivileged read yields an empty table rather than wrong names.
func parseKallsyms(r io.Reader) (*kallsyms, error) {
	ks := &kallsyms{}
	modIndex := map[string]int16{}
	var names []byte
	var etext uint64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		addrF, rest := nextField(sc.Bytes())
		typ, rest := nextField(rest)
		name, rest := nextField(rest)
		mod, _ := nextField(rest)
		if len(addrF) == 0 {
			continue
		}
		if len(name) == 0 {
			return nil, fmt.Errorf("kallsyms line %d: too few fields", line)
		}
		addr, err := strconv.ParseUint(string(addrF), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %d: bad address %q", line, addrF)
		}
		if string(name) == "_etext" {
			etext = addr
		}
		if addr == 0 || len(typ) != 1 || !bytes.ContainsAny(typ, "tTwW") {
			continue
		}
		m := int16(-1)
		if len(mod) > 0 && mod[0] == '[' {
			modName := bytes.TrimSuffix(mod[1:], []byte("]"))
			i, ok := modIndex[string(modName)]
			if !ok {
				if len(ks.modules) >= maxKernelModules {
					return nil, fmt.Errorf("kallsyms line %d: too many modules", line)
				}
				i = int16(len(ks.modules))
				modIndex[string(modName)] = i
				ks.modules = append(ks.modules, kregion{
					start: addr, limit: addr,
					mapping: &report.Mapping{File: "[" + string(modName) + "]"},
				})
			}
			m = i
		}
		name = name[:min(len(name), math.MaxUint16)]
		ks.syms = append(ks.syms, ksym{addr: addr, nameOff: uint32(len(names)), nameLen: uint16(len(name)), module: m})
		names = append(names, name...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kallsyms line %d: %w", line+1, err)
	}
	ks.names = string(names)
	ks.syms = slices.Clip(ks.syms)
	slices.SortStableFunc(ks.syms, func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) })

	ks.core.mapping = &report.Mapping{File: kernelMappingFile}
	first := true
	for _, s := range ks.syms {
		var rg *kregion
		if s.module < 0 {
			rg = &ks.core
		} else {
			rg = &ks.modules[s.module]
		}
		if s.module < 0 && first {
			rg.start, rg.limit = s.addr, s.addr
			first = false
		}
		rg.start = min(rg.start, s.addr)
		rg.limit = max(rg.limit, s.addr)
	}
	if !first {
		if etext > ks.core.limit {
			ks.core.limit = etext
		} else {
			ks.core.limit = addSaturating(ks.core.limit, coreSlack)
		}
	}
	for i := range ks.modules {
		ks.modules[i].limit = addSaturating(ks.modules[i].limit, moduleSlack)
	}
	for _, rg := range append([]kregion{ks.core}, ks.modules...) {
		if rg.mapping != nil {
			rg.mapping.Start, rg.mapping.Limit = rg.start, rg.limit
		}
	}
	return ks, nil
}

// addSaturating returns a+b, or the largest address when that overflows
// (a region at the top of the address space must not wrap to an empty one).
func addSaturating(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// lookup returns the symbol name and mapping of addr; ok is false when addr
// is outside every known region.
func (ks *kallsyms) lookup(addr uint64) (name string, m *report.Mapping, ok bool) {
	i := sort.Search(len(ks.syms), func(i int) bool { return ks.syms[i].addr > addr }) - 1
	if i < 0 {
		return "", nil, false
	}
	s := ks.syms[i]
	rg := ks.core
	if s.module >= 0 {
		rg = ks.modules[s.module]
	}
	// A saturated limit (the top of the address space) includes itself.
	if addr < rg.start || addr >= rg.limit && rg.limit != math.MaxUint64 {
		return "", nil, false
	}
	return ks.name(s), rg.mapping, true
}

// name returns the name of s. It shares the memory of ks.names.
func (ks *kallsyms) name(s ksym) string { return ks.names[s.nameOff : s.nameOff+uint32(s.nameLen)] }

// nextField returns the next field of b (separated by spaces or tabs) and
// the rest.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}
func (ks *kallsyms) len() int { return len(ks.syms) }
