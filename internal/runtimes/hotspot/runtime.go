package hotspot

import (
	"debug/elf"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is HotSpot, as internal/runtimes describes a runtime. It has no
// BPF walker yet: it names the JIT code native walks reach (the leaf frame
// of a thread running compiled Java code, stubs, the interpreter).
var Runtime = &runtimes.Runtime{
	Name:      "jvm",
	NamesCode: true,
	LooksLike: IsJVM,
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		syms, err := ExportedSymbols(f)
		if err != nil {
			return nil, nil // not a serviceable HotSpot
		}
		return &interpreter{syms: syms}, nil
	},
}

// interpreter is one libjvm: the file addresses of its exports.
type interpreter struct{ syms map[string]uint64 }

// WalkerProc: no walker reads HotSpot processes yet.
func (in *interpreter) WalkerProc(uint64) []byte { return nil }

func (in *interpreter) Process(mem io.ReaderAt, bias uint64) runtimes.Process {
	return &process{namer: NewNamer(mem, func(s string) (uint64, bool) {
		v, ok := in.syms[s]
		return v + bias, ok
	}), named: map[uint64]namedCode{}}
}

// process names the code of one JVM, remembering each address's name for
// recheck: the code cache frees and reuses the code of methods.
type process struct {
	namer *Namer
	named map[uint64]namedCode
}

type namedCode struct {
	frame runtimes.Frame
	at    time.Time
}

const (
	recheck  = 10 * time.Second
	maxNamed = 1 << 14
)

// Cached names the code at object, an address in the JVM's code cache,
// from a recent read.
func (p *process) Cached(object uint64, _ uint32, now time.Time) (runtimes.Frame, bool) {
	n, ok := p.named[object]
	if !ok || now.Sub(n.at) > recheck {
		return runtimes.Frame{}, false
	}
	return n.frame, true
}

// Read names the code at object from the process's memory.
func (p *process) Read(object uint64, _ uint32, now time.Time) (runtimes.Frame, error) {
	code, err := p.namer.At(object, now)
	if err != nil {
		return runtimes.Frame{}, err
	}
	f := runtimes.Frame{Function: code.Name(), File: code.Method.SourceFile}
	if len(p.named) >= maxNamed {
		clear(p.named)
	}
	p.named[object] = namedCode{f, now}
	return f, nil
}
