// Package golabels says where the samplers find the runtime/pprof labels
// of the goroutine a Go program's thread runs (pprof.Do,
// SetGoroutineLabels), from the executable's Go release and, for a
// release this package does not know, its DWARF; and decodes the labels
// the samplers copied. Everything read from the file is untrusted.
package golabels

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// Errors of Prepare; they wrap these.
var (
	ErrNotGo   = errors.New("not a Go executable")
	ErrRelease = errors.New("release of Go not supported")
	ErrNoG     = errors.New("where the thread's g is not known")
	ErrMachine = errors.New("machine not supported")
	ErrNoDWARF = errors.New("no DWARF to read the runtime's offsets from")
	// ErrNoLabels: the executable has no code that sets a goroutine's
	// labels, so none has any: nothing to read.
	ErrNoLabels = errors.New("sets no goroutine labels (runtime/pprof's label setter is not linked in)")
	errTooOld   = errors.New("before go1.21")
)

// Binary is what the samplers need to read a Go executable's labels.
type Binary struct {
	Release string // the executable's Go version, as its build info says
	Offsets Offsets
	// TLSOffset is where the thread's g is from its thread pointer,
	// unless GRegister: then it is in x28 only (arm64 without cgo).
	TLSOffset int64
	GRegister bool
	// StringsLo and StringsHi are the file addresses of the executable's
	// .rodata, where its string literals are, loaded read-only (0, 0: not
	// known); a process has them at StringsAt, and the samplers store a
	// label's string there by reference (Decode).
	StringsLo, StringsHi uint64
	// SetsLabels says whether the executable has the code that sets a
	// goroutine's labels (always, from Prepare; PrepareGoroutines also
	// prepares one without, whose threads' goroutines are all there is).
	SetsLabels bool
}

// StringsAt returns where a process that loaded b with bias (0 unless b is
// position independent) has b's literals, or 0, 0: none known, or beyond
// what a reference holds.
func (b *Binary) StringsAt(bias uint64) (lo, hi uint64) {
	lo, hi = b.StringsLo+bias, b.StringsHi+bias
	if b.StringsHi == 0 || lo < bias || hi < lo || hi > refLimit {
		return 0, 0
	}
	return lo, hi
}

// Prepare reads what the samplers need from the executable f (its bytes
// r): its Go release from its build info, the runtime's offsets for it
// (from its DWARF for a release after those known), and where a thread
// keeps its g. ErrNotGo when f is not a Go executable, ErrNoLabels when
// it sets no labels.
func Prepare(r io.ReaderAt, f *elf.File) (*Binary, error) {
	b, err := PrepareGoroutines(r, f)
	if err == nil && !b.SetsLabels {
		return nil, ErrNoLabels
	}
	return b, err
}

// PrepareGoroutines is Prepare for finding the goroutine a thread runs
// (the g it also reads labels from), whether or not f sets labels
// (Binary.SetsLabels).
func PrepareGoroutines(r io.ReaderAt, f *elf.File) (*Binary, error) {
	if f.Section(".go.buildinfo") == nil || !threadctx.Executable(f) {
		return nil, ErrNotGo
	}
	info, err := buildinfo.Read(r)
	if err != nil {
		return nil, fmt.Errorf("%w: build info: %v", ErrNotGo, err)
	}
	b := &Binary{Release: info.GoVersion}
	minor, err := releaseMinor(info.GoVersion)
	if err != nil {
		return nil, err
	}
	var ok bool
	if b.Offsets, ok = knownOffsets[release{minor}]; !ok {
		if minor < 21 {
			return nil, fmt.Errorf("%w: %s: %v", ErrRelease, info.GoVersion, errTooOld)
		}
		if b.Offsets, err = DWARFOffsets(f); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRelease, info.GoVersion, err)
		}
	}
	if err := b.Offsets.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRelease, info.GoVersion, err)
	}
	if err := b.locateG(f); err != nil {
		return nil, err
	}
	b.SetsLabels = setsLabels(f)
	b.StringsLo, b.StringsHi = readOnlySegment(f)
	return b, nil
}

// refLimit bounds the addresses of a reference (go_copy_string stores 6
// bytes of it).
const refLimit = 1 << 48

// readOnlySegment returns the file addresses of f's .rodata, where the Go
// linker puts string literals, when a segment maps it read-only (alone, or
// with the code when linked externally), within a reference's bounds.
func readOnlySegment(f *elf.File) (lo, hi uint64) {
	ro := f.Section(".rodata")
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN || ro == nil || ro.Type != elf.SHT_PROGBITS || ro.Size == 0 ||
		ro.Addr+ro.Size < ro.Addr || ro.Addr+ro.Size > refLimit {
		return 0, 0
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 && ro.Addr >= p.Vaddr && ro.Addr+ro.Size <= p.Vaddr+p.Filesz {
			return ro.Addr, ro.Addr + ro.Size
		}
	}
	return 0, 0
}

// releaseMinor returns the minor release of a build info Go version:
// "go1.23.4", "go1.24rc1", "go1.25.0 X:boringcrypto", "devel go1.26-abc".
func releaseMinor(v string) (int, error) {
	v = strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(v, "devel")), "go1.")
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	minor, err := strconv.Atoi(v[:end])
	if err != nil || end == 0 {
		return 0, fmt.Errorf("%w: version %q", ErrRelease, v)
	}
	return minor, nil
}

// locateG says where a thread of f keeps its g. The runtime stores it in
// TLS on amd64 always (runtime.tlsg: without cgo at -8 from the thread
// pointer, which the runtime sets itself; with cgo in the executable's TLS
// block) and on arm64 with cgo (runtime.tls_g); on arm64 without cgo only
// in x28.
func (b *Binary) locateG(f *elf.File) error {
	var name string
	switch f.Machine {
	case elf.EM_X86_64:
		name = "runtime.tlsg"
	case elf.EM_AARCH64:
		name = "runtime.tls_g"
	default:
		return fmt.Errorf("%w: %v", ErrMachine, f.Machine)
	}
	var tls *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			tls = p
		}
	}
	if tls == nil { // the runtime set the thread pointer up itself
		if f.Machine == elf.EM_AARCH64 {
			b.GRegister = true
		} else {
			b.TLSOffset = -8
		}
		return nil
	}
	if sym, ok := tlsSymbol(f, name); ok {
		off, err := threadctx.StaticOffset(f, sym)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoG, err)
		}
		b.TLSOffset = off
		return nil
	}
	// Stripped of its symbol table.
	switch {
	case f.Machine == elf.EM_AARCH64:
		b.GRegister = true // x28 holds g in Go code; the samplers check it is one
	case tls.Memsz == 8: // runtime.tlsg alone
		b.TLSOffset = -8
	default:
		return fmt.Errorf("%w: no symbol table, and %d bytes of TLS besides runtime.tlsg", ErrNoG, tls.Memsz-8)
	}
	return nil
}

func tlsSymbol(f *elf.File, name string) (elf.Symbol, bool) {
	syms, err := elfsym.Lookup(f, elf.SHT_SYMTAB, elfsym.Match{Names: []string{name}})
	if err != nil {
		return elf.Symbol{}, false
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_TLS {
			return s.Symbol, true
		}
	}
	return elf.Symbol{}, false
}
