package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// kernelMappingFile is the mapping file name of the core kernel image.
const kernelMappingFile = "[kernel.kallsyms]"

// ksym is one text symbol of /proc/kallsyms.
type ksym struct {
	addr   uint64
	name   string
	module int // index into kallsyms.modules; -1 for the core kernel
}

// kregion is the address range of the core kernel or of one module.
type kregion struct {
	start, limit uint64
	mapping      *report.Mapping
}

// kallsyms is a parsed /proc/kallsyms, sorted by address.
type kallsyms struct {
	syms    []ksym
	core    kregion
	modules []kregion
}

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
	modIndex := map[string]int{}
	var etext uint64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("kallsyms line %d: too few fields", line)
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %d: bad address %q", line, f[0])
		}
		if f[2] == "_etext" {
			etext = addr
		}
		if addr == 0 || len(f[1]) != 1 || !strings.ContainsAny(f[1], "tTwW") {
			continue
		}
		mod := -1
		if len(f) >= 4 && strings.HasPrefix(f[3], "[") {
			name := strings.TrimSuffix(strings.TrimPrefix(f[3], "["), "]")
			i, ok := modIndex[name]
			if !ok {
				i = len(ks.modules)
				modIndex[name] = i
				ks.modules = append(ks.modules, kregion{
					start: addr, limit: addr,
					mapping: &report.Mapping{File: "[" + name + "]"},
				})
			}
			mod = i
		}
		ks.syms = append(ks.syms, ksym{addr: addr, name: f[2], module: mod})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kallsyms line %d: %w", line+1, err)
	}
	sort.SliceStable(ks.syms, func(i, j int) bool { return ks.syms[i].addr < ks.syms[j].addr })

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
			ks.core.limit += coreSlack
		}
	}
	for i := range ks.modules {
		ks.modules[i].limit += moduleSlack
	}
	for _, rg := range append([]kregion{ks.core}, ks.modules...) {
		if rg.mapping != nil {
			rg.mapping.Start, rg.mapping.Limit = rg.start, rg.limit
		}
	}
	return ks, nil
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
	if addr < rg.start || addr >= rg.limit {
		return "", nil, false
	}
	return s.name, rg.mapping, true
}
func (ks *kallsyms) len() int { return len(ks.syms) }
