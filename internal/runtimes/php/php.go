// Package php is the PHP runtime (internal/runtimes): it recognises the Zend
// engine in an ELF file (php, php-fpm, Apache's libphp), gives the offsets
// the frame walk needs for its version, walks a process's PHP frames from
// executor_globals as the BPF walker will (Walk, the reference of
// bpf/php.h) and names a frame (a zend_function's address and the op it is
// at) from the process's memory: "Class::method", "function" or "{main}",
// its file and line.
//
// Supported: PHP 8.2 and 8.4, NTS (non-thread-safe) builds as Debian's, on
// x86-64 and arm64 (the same layouts: every offset was printed on both).
// docs/php-layouts.md says where each number was read.
package php

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is PHP, as internal/runtimes describes a runtime.
var Runtime = &runtimes.Runtime{
	Name:          "php",
	ProcMap:       "php_procs",
	ID:            5, // capture.Runtime, bpf/common.h RUNTIME_PHP
	EntryFunction: entryFunction,
	EntryCode:     inJITBuffer,
	JITFrame:      JITFrame,
	// php, php-fpm and libphp under any name: extensions resolve the
	// engine's symbols against them, so they export them.
	Exports: []string{symExecutorGlobals},
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		in, err := Detect(f)
		if errors.Is(err, ErrNotPHP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return in, nil
	},
}

// Symbols Detect looks for.
const (
	symExecutorGlobals = "executor_globals"
	// symZTSOffset is defined by thread-safe (ZTS) builds instead of
	// executor_globals: their globals are in each thread's TSRM block.
	symZTSOffset = "executor_globals_offset"
	// entryFunction is the VM: each call of it runs PHP frames from the
	// one it is entered with (ZEND_CALL_TOP) to the innermost.
	entryFunction = "execute_ex"
)

// versionPrefix opens the PHP_VERSION string every SAPI has in .rodata
// (the X-Powered-By header it sends).
var versionPrefix = []byte("X-Powered-By: PHP/")

var (
	// ErrNotPHP means the file holds no Zend engine.
	ErrNotPHP = errors.New("not a PHP engine")
	// ErrUnsupported means the file holds a PHP this package cannot walk.
	ErrUnsupported = errors.New("unsupported PHP")
)

// Version is a PHP version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Interpreter is the Zend engine found in one file.
type Interpreter struct {
	Version Version
	// ExecutorGlobals is the link-time address of executor_globals.
	ExecutorGlobals uint64
	// ExecuteExStart and ExecuteExEnd are the link-time range [start, end)
	// of execute_ex, the VM: the BPF walker takes the innermost frame's
	// opline from the VM's register when the sampled pc is in it. 0, 0:
	// unknown (the walker then reads it from memory).
	ExecuteExStart, ExecuteExEnd uint64
	Layout                       Layout
}

// Detect finds the PHP engine in f: ErrNotPHP when f defines no
// executor_globals (nor executor_globals_offset), an error wrapping
// ErrUnsupported when its version, build or machine is not one this
// package knows.
func Detect(f *elf.File) (*Interpreter, error) {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: []string{symExecutorGlobals, symZTSOffset, entryFunction}})
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("PHP: read dynamic symbols: %w", err)
	}
	found := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && s.Value != 0 {
			found[s.Name] = s.Symbol
		}
	}
	eg, nts := found[symExecutorGlobals]
	_, zts := found[symZTSOffset]
	if !nts && !zts {
		return nil, ErrNotPHP
	}
	v, err := detectVersion(f)
	if err != nil {
		return nil, err
	}
	if zts {
		return nil, fmt.Errorf("%w %s: a thread-safe (ZTS) build (only NTS builds are supported)", ErrUnsupported, v)
	}
	ex, ok := found[entryFunction]
	if !ok {
		return nil, fmt.Errorf("%w %s: no %s", ErrUnsupported, v, entryFunction)
	}
	if f.Class != elf.ELFCLASS64 || (f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64) {
		return nil, fmt.Errorf("%w %s on %s: only x86-64 and arm64 are supported (the layouts were measured there)", ErrUnsupported, v, f.Machine)
	}
	l, err := layoutOf(v, eg.Size)
	if err != nil {
		return nil, err
	}
	in := &Interpreter{Version: v, ExecutorGlobals: eg.Value, Layout: l}
	if ex.Size > 0 {
		in.ExecuteExStart, in.ExecuteExEnd = ex.Value, ex.Value+ex.Size
	}
	return in, nil
}

// layoutOf is the layout of version v, whose executor_globals is egSize
// bytes: an error wrapping ErrUnsupported for a version not in the table,
// or a size not the table's (a patched or debug build).
func layoutOf(v Version, egSize uint64) (Layout, error) {
	minor := fmt.Sprintf("%d.%d", v.Major, v.Minor)
	l, ok := layouts[minor]
	if !ok {
		return Layout{}, fmt.Errorf("%w version %s (supported: 8.2, 8.4)", ErrUnsupported, v)
	}
	if egSize != l.ExecutorGlobalsSize {
		return Layout{}, fmt.Errorf("%w %s: executor_globals is %d bytes, %s's is %d (a patched or debug build)",
			ErrUnsupported, v, egSize, minor, l.ExecutorGlobalsSize)
	}
	return l, nil
}

// detectVersion reads PHP_VERSION from the "X-Powered-By: PHP/8.2.36"
// string in .rodata.
func detectVersion(f *elf.File) (Version, error) {
	s := f.Section(".rodata")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return Version{}, fmt.Errorf("%w: no .rodata to read its version from", ErrUnsupported)
	}
	if s.Size > maxRodata {
		return Version{}, fmt.Errorf("%w: .rodata of %d bytes (more than %d)", ErrUnsupported, s.Size, maxRodata)
	}
	data, err := s.Data()
	if err != nil {
		return Version{}, fmt.Errorf("%w: read .rodata: %v", ErrUnsupported, err)
	}
	i := bytes.Index(data, versionPrefix)
	if i < 0 {
		return Version{}, fmt.Errorf("%w: no %q in .rodata", ErrUnsupported, versionPrefix)
	}
	v, ok := parseVersion(data[i+len(versionPrefix):])
	if !ok {
		end := min(len(data), i+len(versionPrefix)+16)
		return Version{}, fmt.Errorf("%w: unreadable version %q", ErrUnsupported, data[i:end])
	}
	return v, nil
}

// maxRodata bounds the .rodata Detect reads (php's is about 1 MiB).
const maxRodata = 64 << 20

// parseVersion parses "major.minor.patch" at the start of b, up to a NUL
// or a non-digit suffix ("8.2.36", "8.4.0RC1", "8.2.36-1+deb12u1").
func parseVersion(b []byte) (Version, bool) {
	var n [3]int
	for i := range n {
		j := 0
		for j < len(b) && j < 4 && b[j] >= '0' && b[j] <= '9' {
			n[i] = n[i]*10 + int(b[j]-'0')
			j++
		}
		if j == 0 || j == 4 {
			return Version{}, false
		}
		b = b[j:]
		if i < 2 {
			if len(b) == 0 || b[0] != '.' {
				return Version{}, false
			}
			b = b[1:]
		}
	}
	return Version{n[0], n[1], n[2]}, true
}

// RuntimeVersion is the engine's minor version ("8.2").
func (in *Interpreter) RuntimeVersion() string {
	return fmt.Sprintf("%d.%d", in.Version.Major, in.Version.Minor)
}

// walkerProc is php_proc of bpf/php.h (bpf.PhpwalkPhpProc): what the BPF
// walker needs of one PHP process, as Walk reads it: where executor_globals
// and execute_ex are (load bias added) and the offsets of its version.
type walkerProc struct {
	ExecutorGlobals     uint64
	ExecuteExStart      uint64
	ExecuteExEnd        uint64
	CurrentExecuteData  uint32
	ExecuteDataOpline   uint32
	ExecuteDataFunc     uint32
	ExecuteDataCallInfo uint32
	ExecuteDataPrev     uint32
	FunctionType        uint32
	OpArrayLast         uint32
	OpArrayOpcodes      uint32
	OpSize              uint32
	OpArrayFilename     uint32
	OpLineno            uint32
	Reserved            uint32
}

// WalkerProc is the php_procs entry of a process whose engine file is
// loaded with bias bias. It reads nothing of the process.
func (in *Interpreter) WalkerProc(_ io.ReaderAt, bias uint64) ([]byte, error) {
	l := &in.Layout
	var exStart, exEnd uint64
	if in.ExecuteExEnd != 0 {
		exStart, exEnd = in.ExecuteExStart+bias, in.ExecuteExEnd+bias
	}
	return binary.Append(nil, binary.NativeEndian, &walkerProc{
		ExecutorGlobals:     in.ExecutorGlobals + bias,
		ExecuteExStart:      exStart,
		ExecuteExEnd:        exEnd,
		CurrentExecuteData:  l.CurrentExecuteData,
		ExecuteDataOpline:   l.ExecuteDataOpline,
		ExecuteDataFunc:     l.ExecuteDataFunc,
		ExecuteDataCallInfo: l.ExecuteDataCallInfo,
		ExecuteDataPrev:     l.ExecuteDataPrev,
		FunctionType:        l.FunctionType,
		OpArrayLast:         l.OpArrayLast,
		OpArrayOpcodes:      l.OpArrayOpcodes,
		OpSize:              l.OpSize,
		OpArrayFilename:     l.OpArrayFilename,
		OpLineno:            l.OpLineno,
	})
}

// Process returns what names the PHP frames of one process running the
// engine, reading its memory mem.
func (in *Interpreter) Process(mem io.ReaderAt, _ uint64) runtimes.Process {
	return &process{layout: &in.Layout, mem: mem}
}
