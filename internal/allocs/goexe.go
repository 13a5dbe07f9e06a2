package allocs

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/gosites"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// The runtime's allocation profiling hooks (bpf/alloc.bpf.c).
const (
	fnMalloc      = "runtime.mProf_Malloc"
	fnFreeSpecial = "runtime.freeSpecial"
	fnFree        = "runtime.mProf_Free"
	fnCycle       = "runtime.gcMarkTermination"
	varRate       = "runtime.MemProfileRate"
)

// ErrNotGo is returned for a file that is not a Go executable.
var ErrNotGo = errors.New("not a Go executable")

// ErrRelease is returned for a Go release whose hooks are not known.
var ErrRelease = errors.New("release of Go not supported")

// MallocArgs says where runtime.mProf_Malloc takes the object: first
// (go1.21-1.22: p, size) or second (go1.23+: mp, p, size), size after it.
type MallocArgs int

const (
	MallocP0 MallocArgs = iota // bpf go_malloc_p0
	MallocP1                   // bpf go_malloc_p1
)

// Oldest and newest Go releases (go1.N) whose hooks are known: the
// signatures of mProf_Malloc, freeSpecial and mProf_Free were read in each
// release's runtime sources (go1.21.13 … go1.27.3): freeSpecial(s, p,
// size) throughout; mProf_Free(b, size) until go1.26, mProf_Free(b) in
// go1.27 (its arguments are not read: the object is freeSpecial's).
const (
	oldestMinor = 21
	newestMinor = 27
)

// mallocArgs returns where release minor's mProf_Malloc takes its object.
func mallocArgs(minor int) MallocArgs {
	if minor <= 22 {
		return MallocP0
	}
	return MallocP1
}

// Hooks are where one Go executable's allocation hooks are probed, as file
// offsets (uprobes go after each function's stack check, internal/gosites),
// and where its MemProfileRate is.
type Hooks struct {
	Release                   string
	Args                      MallocArgs
	Malloc, FreeSpecial, Free uint64
	Cycle                     uint64 // gcMarkTermination
	// RateAddr is runtime.MemProfileRate's virtual address in the file (0:
	// not in its symbol table); a process has it at RateAddr + its bias.
	RateAddr uint64
}

// FindHooks reads the hooks of the Go executable f (its bytes r, its
// functions funcs as symbolize.FindFunctions reads them with HookNames).
func FindHooks(r io.ReaderAt, ef *elf.File, funcs symbolize.ELFFunctions) (Hooks, error) {
	if !funcs.Go || ef.Section(".go.buildinfo") == nil {
		return Hooks{}, ErrNotGo
	}
	info, err := buildinfo.Read(r)
	if err != nil {
		return Hooks{}, fmt.Errorf("%w: build info: %v", ErrNotGo, err)
	}
	minor, err := releaseMinor(info.GoVersion)
	if err != nil {
		return Hooks{}, err
	}
	if minor < oldestMinor || minor > newestMinor {
		return Hooks{}, fmt.Errorf("%w: %s (known: go1.%d to go1.%d)", ErrRelease, info.GoVersion, oldestMinor, newestMinor)
	}
	h := Hooks{Release: info.GoVersion, Args: mallocArgs(minor)}
	for _, w := range []struct {
		name string
		at   *uint64
	}{{fnMalloc, &h.Malloc}, {fnFreeSpecial, &h.FreeSpecial}, {fnFree, &h.Free}, {fnCycle, &h.Cycle}} {
		if *w.at, err = entrySite(funcs, w.name); err != nil {
			return Hooks{}, err
		}
	}
	if syms, err := ef.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == varRate && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Size == 8 {
				h.RateAddr = s.Value
				break
			}
		}
	}
	return h, nil
}

// HookNames matches the functions FindHooks needs.
func HookNames(name string) bool {
	return name == fnMalloc || name == fnFreeSpecial || name == fnFree || name == fnCycle
}

// entrySite returns the file offset of the first instruction of Go
// function name after its stack check.
func entrySite(funcs symbolize.ELFFunctions, name string) (uint64, error) {
	for _, fn := range funcs.Symbols {
		if fn.Name != name {
			continue
		}
		if !fn.Go || fn.Code == nil {
			return 0, fmt.Errorf("%s: no Go code to read", name)
		}
		entry, err := gosites.FindEntry(funcs.Machine, fn.Value, fn.Code)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return fn.Offset + entry - fn.Value, nil
	}
	return 0, fmt.Errorf("%s: not in the symbol table (inlined, or the executable is stripped)", name)
}

// releaseMinor returns N of a "go1.N[.P]" version (a toolchain's
// "go1.N.P X:..." suffixes included).
func releaseMinor(v string) (int, error) {
	rest, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return 0, fmt.Errorf("%w: version %q", ErrRelease, v)
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end == 0 {
		return 0, fmt.Errorf("%w: version %q", ErrRelease, v)
	}
	if end > 0 {
		rest = rest[:end]
	}
	return strconv.Atoi(rest)
}

// Bias returns the load bias of a process's executable whose program
// headers are progs, mapped at start from file offset off: start - the
// vaddr of the PT_LOAD segment at off.
func Bias(progs []elf.ProgHeader, start, off uint64) (uint64, bool) {
	for _, p := range progs {
		if p.Type != elf.PT_LOAD || off < p.Off || off >= p.Off+p.Filesz {
			continue
		}
		return start - (p.Vaddr + (off - p.Off)), true
	}
	return 0, false
}
