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
	return &process{NewNamer(mem, func(s string) (uint64, bool) {
		v, ok := in.syms[s]
		return v + bias, ok
	})}
}

type process struct{ namer *Namer }

// Frame names the code at object, an address in the JVM's code cache.
func (p *process) Frame(object uint64, _ uint32, now time.Time) (runtimes.Frame, error) {
	code, err := p.namer.At(object, now)
	if err != nil {
		return runtimes.Frame{}, err
	}
	return runtimes.Frame{Function: code.Name(), File: code.Method.SourceFile}, nil
}
