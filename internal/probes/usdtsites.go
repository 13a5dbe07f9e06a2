package probes

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// fileNotes are the USDT probe sites of one probed file, or why its USDT
// probes are not used.
type fileNotes struct {
	machine elf.Machine
	sites   []usdt.Probe
	err     error // usdt.ErrNoProbes: none declared; errGoUSDT, or the notes refused
}

// errGoUSDT refuses USDT probes in a Go binary: their sites run on
// goroutine stacks, whose scopes a thread's uprobes do not follow.
var errGoUSDT = errors.New("USDT probes in Go binaries are not supported")

// readNotes reads the USDT probes of the ELF file r.
func readNotes(r io.ReaderAt) fileNotes {
	f, err := elf.NewFile(r)
	if err != nil {
		return fileNotes{err: err}
	}
	for _, s := range []string{".go.buildinfo", ".gopclntab"} {
		if f.Section(s) != nil {
			return fileNotes{err: errGoUSDT}
		}
	}
	sites, err := usdt.Probes(f)
	return fileNotes{machine: f.Machine, sites: sites, err: err}
}

// usdtSites returns where probe s's uprobes go in a file with notes n:
// every site of its entry probe and of its exit probe, each with its
// semaphore's file offset, and each entry site's fetch of the
// arguments attrs name (symOffset.args). missing names a probe the file
// does not declare; err is why the file's probes are refused (its notes,
// or an argument spec of an entry site the fetch cannot do).
func (n fileNotes) usdtSites(s Spec, attrs []Attribute) (entry, exit []symOffset, missing string, err error) {
	if n.err != nil && !errors.Is(n.err, usdt.ErrNoProbes) {
		return nil, nil, "", n.err
	}
	entry, exit = n.sitesOf(s.EntryUSDT), n.sitesOf(s.ExitUSDT)
	switch {
	case len(entry) == 0:
		missing = s.EntryUSDT
	case len(exit) == 0:
		missing = s.ExitUSDT
	}
	if len(attrs) > 0 && missing == "" {
		for i := range entry {
			if entry[i].args, err = argsSpec(n.machine, entry[i].argSpecs, attrs); err != nil {
				return nil, nil, "", fmt.Errorf("%s at %#x: %w", s.EntryUSDT, entry[i].offset, err)
			}
		}
	}
	return entry, exit, missing, nil
}

// sitesOf returns the sites of the probe "provider:name".
func (n fileNotes) sitesOf(probe string) []symOffset {
	var out []symOffset
	for _, p := range n.sites {
		if p.FullName() == probe {
			out = append(out, symOffset{name: probe, offset: p.Offset, refCtr: p.SemaphoreOffset, argSpecs: p.ArgSpecs})
		}
	}
	return out
}

// argsSpec returns the BPF fetch of the arguments attrs name at a site
// of machine m whose argument specs are specs.
func argsSpec(m elf.Machine, specs string, attrs []Attribute) (*bpf.ProbeUsdtArgsSpec, error) {
	fields, err := usdt.SplitArgs(m, specs)
	if err != nil {
		return nil, err
	}
	var out bpf.ProbeUsdtArgsSpec
	for i, a := range attrs {
		if a.Arg >= len(fields) {
			return nil, fmt.Errorf("attribute %s: argument %d of a probe with %d", a.Name, a.Arg, len(fields))
		}
		arg, err := usdt.ParseArg(m, fields[a.Arg])
		if err != nil {
			return nil, fmt.Errorf("attribute %s: argument %d %q: %w", a.Name, a.Arg, fields[a.Arg], err)
		}
		if a.String && arg.Size != 8 {
			return nil, fmt.Errorf("attribute %s: argument %d %q: a string's address is 8 bytes, not %d", a.Name, a.Arg, fields[a.Arg], arg.Size)
		}
		out.Args[i] = argSpec(arg, a.String)
	}
	return &out, nil
}

// argSpec is the BPF form of a (bpf/usdtargs.h).
func argSpec(a usdt.Arg, str bool) bpf.ProbeUsdtArgSpec {
	s := bpf.ProbeUsdtArgSpec{RegOff: a.RegOffset, Size: a.Size}
	switch a.Kind {
	case usdt.ArgConst:
		s.Kind, s.Value = usdtArgConst, a.Value
	case usdt.ArgRegister:
		s.Kind = usdtArgRegister
	case usdt.ArgMemory:
		s.Kind, s.Value = usdtArgMemory, a.Offset
	}
	if a.Signed {
		s.IsSigned = 1
	}
	if str {
		s.String = 1
	}
	return s
}

// enum usdt_arg_kind in bpf/usdtargs.h.
const (
	usdtArgConst    = 1
	usdtArgRegister = 2
	usdtArgMemory   = 3
)

// maxUSDTArgSpecs is the size of usdt_specs in bpf/usdtargs.h.
const maxUSDTArgSpecs = 1024

// usdtArgSpecs hands out usdt_specs entries, one per distinct fetch: a
// probe's sites that keep its arguments in the same places share one.
// Entries are never freed: there are as many as distinct fetches of the
// probed files (a few per probe), bounded by the map.
type usdtArgSpecs struct {
	put   func(uint32, *bpf.ProbeUsdtArgsSpec) error
	index map[bpf.ProbeUsdtArgsSpec]uint32
}

func newUSDTArgSpecs(put func(uint32, *bpf.ProbeUsdtArgsSpec) error) *usdtArgSpecs {
	return &usdtArgSpecs{put: put, index: make(map[bpf.ProbeUsdtArgsSpec]uint32)}
}

// cookie returns s's usdt_specs index + 1, writing it there the first
// time. The attacher's lock serializes calls.
func (u *usdtArgSpecs) cookie(s *bpf.ProbeUsdtArgsSpec) (uint32, error) {
	if i, ok := u.index[*s]; ok {
		return i + 1, nil
	}
	i := uint32(len(u.index))
	if i >= maxUSDTArgSpecs {
		return 0, fmt.Errorf("more than %d distinct argument fetches", maxUSDTArgSpecs)
	}
	if err := u.put(i, s); err != nil {
		return 0, fmt.Errorf("write argument fetch %d: %w", i, err)
	}
	u.index[*s] = i
	return i + 1, nil
}
