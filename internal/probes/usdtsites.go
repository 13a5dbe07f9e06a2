package probes

import (
	"debug/elf"
	"errors"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// fileNotes are the USDT probe sites of one probed file, or why its USDT
// probes are not used.
type fileNotes struct {
	sites []usdt.Probe
	err   error // usdt.ErrNoProbes: none declared; errGoUSDT, or the notes refused
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
	return fileNotes{sites: sites, err: err}
}

// usdtSites returns where probe s's uprobes go in a file with notes n:
// every site of its entry probe and of its exit probe, each with its
// semaphore's file offset. missing names a probe the file does not
// declare; err is why the file's probes are refused.
func (n fileNotes) usdtSites(s Spec) (entry, exit []symOffset, missing string, err error) {
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
	return entry, exit, missing, nil
}

// sitesOf returns the sites of the probe "provider:name".
func (n fileNotes) sitesOf(probe string) []symOffset {
	var out []symOffset
	for _, p := range n.sites {
		if p.FullName() == probe {
			out = append(out, symOffset{name: probe, offset: p.Offset, refCtr: p.SemaphoreOffset})
		}
	}
	return out
}
