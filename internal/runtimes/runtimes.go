// Package runtimes is the seam between the profiler and the language
// runtimes (interpreters, JITs) whose frames BPF walkers read. Each runtime
// is one package below this one (cpython, hotspot, v8) with its
// walker in one header under bpf/, and describes itself with a Runtime: it
// detects the runtime in a mapped file, gives what its walker needs per
// process (internal/unwinder puts it in the walker's map) and names its
// frames from the process's memory (internal/symbolize asks). Package all
// lists the runtimes; nothing else imports a runtime's package.
package runtimes

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Runtime describes one runtime: what the profiler needs to know of it, and
// how to find it in a file.
type Runtime struct {
	// Name names the runtime in frames (capture.Runtime), telemetry and
	// output: its frames' profile.frame.type ("cpython").
	Name string
	// ProcMap is the BPF map its walker reads per process: a hash from pid
	// (as the collector sees it) to Interpreter.WalkerProc.
	ProcMap string
	// ID is the runtime's id: capture.Runtime's, and bpf/runtimes.h's
	// enum runtime_id.
	ID uint8
	// InPlace says the runtime's walker reads frames in place, during the
	// native walk (JIT code; bpf/runtimes.h's dispatch): every executable
	// mapping of a process running it carries its ID. A runtime with an
	// EntryFunction is walked apart instead.
	InPlace bool
	// NamesCode says the runtime names native code addresses in anonymous
	// memory (JIT code): a frame there is asked of Process.Frame with the
	// address as its object.
	NamesCode bool
	// EntryFunction is the native function each call of which runs one run
	// of the runtime's frames (a frame with capture.Frame.Entry ends a
	// run): a stack's runs take the place of its calls, in order from the
	// leaf. "" when the walker puts the runtime's frames in place.
	EntryFunction string
	// EntryRange, where set, finds the link-time code range [start, end)
	// of EntryFunction in a file holding the runtime, for files whose
	// symbol tables do not name it (a static function of a stripped
	// library: Ruby's vm_exec_core): the symbolizer names that range.
	EntryRange func(f *elf.File) (start, end uint64, err error)
	// EntryCode, where set, says whether m, an executable mapping of a
	// process running the runtime, holds JIT code that runs on the entry
	// function's frame, jumped to from it (PHP's JIT buffer): the
	// symbolizer names a pc there EntryFunction, so the run of the
	// runtime's frames that code runs takes its place.
	EntryCode func(m procfs.Map) bool
	// JITFrame, where set, returns from f, a file holding the runtime, and
	// its CFI rows the unwind row of code in EntryCode memory (it runs on
	// the entry function's frame): the unwinder walks such memory with
	// that row, placed past the file's own rows in its table.
	JITFrame func(f *elf.File, rows iter.Seq[cfi.Row]) (cfi.Row, error)
	// Exports are symbols a file holding the runtime defines in its
	// dynamic symbol table, one at least: a file defining none holds none,
	// whatever its name or path (a renamed node, a single executable
	// application, libnode, a relocated libjvm). MayHold looks them up.
	Exports []string
	// Static says the runtime may be linked into an executable without
	// dynamic symbols (CPython built static): Detect reads such a file's
	// own symbol table.
	Static bool
	// Detect returns the runtime in the ELF file f, nil when f holds none,
	// or an error naming the version or build it cannot walk.
	Detect func(f *elf.File) (Interpreter, error)
}

// MayHold says whether f may hold rt, from what it is, never its name:
// whether its dynamic symbol hash table has one of rt.Exports (a few reads
// whatever the table's size). A file without a hash table, or with a
// malformed one, may: Detect reads its symbol tables, bounded.
func (rt *Runtime) MayHold(f *elf.File) bool {
	ok, err := elfsym.Defines(f, rt.Exports...)
	switch {
	case errors.Is(err, elf.ErrNoSymbols):
		// A Go program without dynamic symbols links no interpreter.
		return rt.Static && f.Section(".go.buildinfo") == nil
	case err != nil:
		return true
	}
	return ok
}

// Interpreter is a runtime found in one file, shared by the processes that
// map it.
type Interpreter interface {
	// WalkerProc is the value of the runtime's ProcMap entry for a process
	// that maps the file with load bias bias: the bytes of the C struct
	// its walker reads. A runtime that needs more than the file reads mem,
	// the process's memory (bounded reads, the process is not trusted); an
	// error says the process is not ready (asked again later) or cannot be
	// walked.
	WalkerProc(mem io.ReaderAt, bias uint64) ([]byte, error)
	// Process returns what names the frames of one process from mem, its
	// memory (/proc/PID/mem), where the file is loaded with bias; reads are
	// bounded, the process is not trusted.
	Process(mem io.ReaderAt, bias uint64) Process
}

// Versioned is implemented by an Interpreter that tells its version
// ("3.14"): processes are counted by it, so operators see what they run.
type Versioned interface {
	RuntimeVersion() string
}

// CodeRanges is implemented by an Interpreter whose JIT code lives in
// address ranges that grow while the process runs (a JVM's code heaps,
// committed as they fill): the loader maps the ranges whole, so code made
// after the process's mappings were read is still walked.
type CodeRanges interface {
	// CodeRanges returns the [start, end) ranges the entry value (from
	// WalkerProc) describes.
	CodeRanges(value []byte) [][2]uint64
}

// Process names the frames of the runtime in one process: the frame whose
// object (code object, method) is at object in the process, at position
// in it. now dates what it caches.
type Process interface {
	// Cached names the frame from what was read before, while that is
	// recent enough; it reads nothing.
	Cached(object uint64, position uint32, now time.Time) (Frame, bool)
	// Read names the frame, reading the process's memory. The caller may
	// run it under a deadline, and call it again (for another frame) once
	// a call that missed the deadline has returned.
	Read(object uint64, position uint32, now time.Time) (Frame, error)
}

// PCProcess is implemented by a Process whose frames read in place are
// told better by the pc of their native frame too (JIT code: the line, and
// the functions inlined there): the symbolizer then asks it, with that pc,
// instead of Process.
type PCProcess interface {
	// CachedPC is Process.Cached for the frame running code at pc.
	CachedPC(object uint64, position uint32, pc uint64, now time.Time) (Frame, bool)
	// ReadPC is Process.Read for the frame running code at pc.
	ReadPC(object uint64, position uint32, pc uint64, now time.Time) (Frame, error)
}

// Frame is a runtime frame named. Inlined are the frames of functions
// inlined into it at its position (JIT code), the innermost first: in a
// stack they come before it.
type Frame struct {
	Function, File string
	Line           int64
	Inlined        []Frame
}

// ReadMem reads n bytes at addr of a process's memory mem, all or an
// error: the runtimes' bounded read of memory they do not trust.
func ReadMem(mem io.ReaderAt, addr uint64, n int) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("NULL pointer")
	}
	if n < 0 || addr > math.MaxInt64-uint64(n) {
		return nil, fmt.Errorf("%d bytes at address %#x: out of range", n, addr)
	}
	b := make([]byte, n)
	if got, err := mem.ReadAt(b, int64(addr)); got < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}
