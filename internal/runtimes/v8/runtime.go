package v8

import (
	"debug/elf"
	"errors"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is V8 as node embeds it, as internal/runtimes describes a
// runtime. Its BPF walker (bpf/v8.h) reads each JavaScript frame's
// function and bytecode offset; the frames are named from the function's
// SharedFunctionInfo.
var Runtime = &runtimes.Runtime{
	Name:    "v8js",
	ProcMap: "v8_procs",
	ID:      3, // capture.Runtime, bpf/runtimes.h RUNTIME_V8
	InPlace: true,
	// node, nodejs, libnode and any binary embedding them export V8's
	// version (for native addons), under any name.
	Exports: []string{symMajor},
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		if err := runtimes.RequireWalkedMachine(f, "the V8 walker"); err != nil {
			return nil, err
		}
		l, err := ReadLayout(f)
		if errors.Is(err, ErrNoV8) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &interpreter{layout: l}, nil
	},
}

// interpreter is the V8 of one node binary.
type interpreter struct{ layout *Layout }

// WalkerProc is the walker's entry for a process that maps the binary at
// bias.
func (in *interpreter) WalkerProc(_ io.ReaderAt, bias uint64) ([]byte, error) {
	return walkerProc(in.layout, bias)
}

func (in *interpreter) Process(mem io.ReaderAt, _ uint64) runtimes.Process {
	return &process{namer: NewNamer(mem, in.layout), named: map[namedKey]named{}}
}

// process names the frames of one node process, remembering each for
// recheck: the heap moves and frees objects.
type process struct {
	namer *Namer
	named map[namedKey]named
}

// namedKey is a frame named: its function (object) at a position, or
// running compiled code at pc (position 0).
type namedKey struct {
	object   uint64
	position uint32
	pc       uint64
}

type named struct {
	frame  runtimes.Frame
	at     time.Time
	cookie uint64 // the function's identity when read (Namer.cookie)
}

const (
	recheck  = 10 * time.Second
	maxNamed = 1 << 14
)

// Cached names the frame of the SharedFunctionInfo at object (tagged) at
// position from a recent read.
func (p *process) Cached(object uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	n, ok := p.named[namedKey{object, position, 0}]
	if !ok || now.Sub(n.at) > recheck {
		return runtimes.Frame{}, false
	}
	return n.frame, true
}

// Read names the frame of the SharedFunctionInfo at object (tagged) at
// position: 0 for compiled code, else the bytecode offset + 1 (0xffff:
// unknown).
func (p *process) Read(object uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	return p.read(namedKey{object, position, 0}, now, func() (runtimes.Frame, error) {
		return p.namer.Frame(object, position, now)
	})
}

// read names the frame of key: what was read of it before, while its
// function's cookie is the same (a function the garbage collector moved
// or freed has another), else by read.
func (p *process) read(key namedKey, now time.Time, read func() (runtimes.Frame, error)) (runtimes.Frame, error) {
	cookie, err := p.namer.cookie(key.object)
	if err != nil {
		return runtimes.Frame{}, err
	}
	if n, ok := p.named[key]; ok && n.cookie == cookie {
		n.at = now
		p.named[key] = n
		return n.frame, nil
	}
	f, err := read()
	if err != nil {
		return runtimes.Frame{}, err
	}
	if len(p.named) >= maxNamed {
		clear(p.named)
	}
	p.named[key] = named{f, now, cookie}
	return f, nil
}

// CachedPC is Cached for a frame read in place at pc: a compiled frame
// (position 0) is named by the code at pc.
func (p *process) CachedPC(object uint64, position uint32, pc uint64, now time.Time) (runtimes.Frame, bool) {
	if position != 0 {
		return p.Cached(object, position, now)
	}
	n, ok := p.named[namedKey{object, 0, pc}]
	if !ok || now.Sub(n.at) > recheck {
		return runtimes.Frame{}, false
	}
	return n.frame, true
}

// ReadPC is Read for a frame read in place at pc: a compiled frame gets
// the line its code's source positions give at pc, and the functions
// inlined there.
func (p *process) ReadPC(object uint64, position uint32, pc uint64, now time.Time) (runtimes.Frame, error) {
	if position != 0 {
		return p.Read(object, position, now)
	}
	return p.read(namedKey{object, 0, pc}, now, func() (runtimes.Frame, error) {
		return p.namer.Compiled(object, pc, now, func(sfi uint64) (runtimes.Frame, error) {
			if f, ok := p.Cached(sfi, 0, now); ok {
				return f, nil
			}
			return p.Read(sfi, 0, now)
		})
	})
}
