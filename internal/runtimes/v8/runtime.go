package v8

import (
	"debug/elf"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is V8 as node embeds it, as internal/runtimes describes a
// runtime. Its BPF walker (bpf/v8.h) reads each JavaScript frame's
// function and bytecode offset; the frames are named from the function's
// SharedFunctionInfo.
var Runtime = &runtimes.Runtime{
	Name:      "v8js",
	ProcMap:   "v8_procs",
	LooksLike: IsNode,
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
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

// IsNode says whether path may be a node binary or libnode.
func IsNode(path string) bool {
	base := filepath.Base(path)
	return base == "node" || base == "nodejs" || strings.HasPrefix(base, "libnode.so")
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

type namedKey struct {
	object   uint64
	position uint32
}

type named struct {
	frame runtimes.Frame
	at    time.Time
}

const (
	recheck  = 10 * time.Second
	maxNamed = 1 << 14
)

// Cached names the frame of the SharedFunctionInfo at object (tagged) at
// position from a recent read.
func (p *process) Cached(object uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	n, ok := p.named[namedKey{object, position}]
	if !ok || now.Sub(n.at) > recheck {
		return runtimes.Frame{}, false
	}
	return n.frame, true
}

// Read names the frame of the SharedFunctionInfo at object (tagged) at
// position: 0 for compiled code, else the bytecode offset + 1 (0xffff:
// unknown).
func (p *process) Read(object uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	f, err := p.namer.Frame(object, position, now)
	if err != nil {
		return runtimes.Frame{}, err
	}
	if len(p.named) >= maxNamed {
		clear(p.named)
	}
	p.named[namedKey{object, position}] = named{f, now}
	return f, nil
}
