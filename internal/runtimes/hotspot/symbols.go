package hotspot

import (
	"debug/elf"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
)

// ExportedSymbols returns the file virtual addresses of Symbols that f (a
// libjvm) exports; the run-time address is the value plus the mapping's
// load bias. A libjvm that exports none of them is not a HotSpot one (or
// one built without serviceability support).
func ExportedSymbols(f *elf.File) (map[string]uint64, error) {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: Symbols})
	if err != nil {
		return nil, fmt.Errorf("dynamic symbols: %w", err)
	}
	out := map[string]uint64{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && s.Value != 0 {
			out[s.Name] = s.Value
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no gHotSpotVM* symbols exported")
	}
	return out, nil
}

// ReadProcess reads the tables of the JVM whose libjvm is f, loaded with
// bias (run-time address = file virtual address + bias), from mem, the
// process's memory.
func ReadProcess(mem io.ReaderAt, f *elf.File, bias uint64) (*VMStructs, error) {
	syms, err := ExportedSymbols(f)
	if err != nil {
		return nil, err
	}
	return Read(mem, func(name string) (uint64, bool) {
		v, ok := syms[name]
		return v + bias, ok
	})
}
