package hotspot

import (
	"debug/elf"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Runtime is HotSpot, as internal/runtimes describes a runtime. Its BPF
// walker (bpf/hotspot.h) steps through the Java frames of the code cache in
// place between the native ones; the frames are named from their code
// (compiled methods, stubs, the interpreter).
var Runtime = &runtimes.Runtime{
	Name:      "jvm",
	ProcMap:   "hotspot_procs",
	ID:        2, // capture.Runtime, bpf/runtimes.h RUNTIME_HOTSPOT
	InPlace:   true,
	NamesCode: true,
	Exports:   []string{"gHotSpotVMStructs"}, // libjvm's, in any JDK layout
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		if err := runtimes.RequireWalkedMachine(f, "the HotSpot walker"); err != nil {
			return nil, err
		}
		syms, err := ExportedSymbols(f)
		if err != nil {
			return nil, nil // not a serviceable HotSpot
		}
		return &interpreter{syms: syms, machine: f.Machine}, nil
	},
}

// interpreter is one libjvm: the file addresses of its exports and its
// machine (whose frames its interpreter lays out).
type interpreter struct {
	syms    map[string]uint64
	machine elf.Machine
}

// WalkerProc reads the process's code cache: ErrNotInitialised (and
// others) until the JVM has made it.
func (in *interpreter) WalkerProc(mem io.ReaderAt, bias uint64) ([]byte, error) {
	return WalkerProc(mem, in.addr(bias), in.machine)
}

// CodeRanges are the reserved ranges of the code heaps of the walker entry
// value.
func (in *interpreter) CodeRanges(value []byte) [][2]uint64 { return codeRanges(value) }

func (in *interpreter) Process(mem io.ReaderAt, bias uint64) runtimes.Process {
	return &process{namer: NewNamer(mem, in.addr(bias)), named: map[namedKey]namedCode{}}
}

// addr gives the run-time addresses of the exports at load bias bias.
func (in *interpreter) addr(bias uint64) func(string) (uint64, bool) {
	return func(s string) (uint64, bool) {
		v, ok := in.syms[s]
		return v + bias, ok
	}
}

// process names the code of one JVM, remembering each address's name for
// recheck: the code cache frees and reuses the code of methods.
type process struct {
	namer *Namer
	named map[namedKey]namedCode
}

// namedKey is a frame named: code at an address (position 0), or a method
// at a bytecode index.
type namedKey struct {
	object   uint64
	position uint32
}

type namedCode struct {
	frame runtimes.Frame
	at    time.Time
}

const (
	recheck  = 10 * time.Second
	maxNamed = 1 << 14
)

// bciUnknown is the position of an interpreted frame whose bytecode index
// the walker could not tell (HOTSPOT_BCI_UNKNOWN).
const bciUnknown = 0xffff

func frameOf(f JavaFrame) runtimes.Frame {
	return runtimes.Frame{Function: f.Method.String(), File: f.Method.SourceFile, Line: f.Line}
}

// Cached names the frame at object from a recent read: at position 0 code
// at object, an address in the JVM's code cache; else an interpreted frame
// of the Method at object, at bytecode index position-1 (bpf/hotspot.h).
// Code and methods are never at the same address.
func (p *process) Cached(object uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	n, ok := p.named[namedKey{object, position}]
	if !ok || now.Sub(n.at) > recheck {
		return runtimes.Frame{}, false
	}
	return n.frame, true
}

// Read names the frame at object from the process's memory (see Cached).
func (p *process) Read(object uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	var f runtimes.Frame
	if position == 0 {
		code, err := p.namer.At(object, now)
		if err != nil {
			return f, err
		}
		f = runtimes.Frame{Function: code.Name(), File: code.Method.SourceFile}
		if n := len(code.Frames); n > 0 {
			f = frameOf(code.Frames[n-1])
			for _, in := range code.Frames[:n-1] {
				f.Inlined = append(f.Inlined, frameOf(in))
			}
		}
	} else {
		bci := int(position) - 1
		if position == bciUnknown {
			bci = -1
		}
		jf, err := p.namer.Method(object, bci, now)
		if err != nil {
			return f, err
		}
		f = frameOf(jf)
	}
	if len(p.named) >= maxNamed {
		clear(p.named)
	}
	p.named[namedKey{object, position}] = namedCode{f, now}
	return f, nil
}
