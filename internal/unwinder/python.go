package unwinder

import (
	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/python"
)

// pythonProc is what the BPF walk of bpf/python.h needs of an interpreter
// whose _PyRuntime is at runtime in the process.
func pythonProc(in *python.Interpreter, runtime uint64) bpf.CpuPythonProc {
	o := in.Offsets
	p := bpf.CpuPythonProc{
		Runtime:            runtime,
		InterpretersHead:   o.RuntimeInterpretersHead,
		ThreadsHead:        o.InterpThreadsHead,
		ThreadNext:         o.ThreadNext,
		ThreadId:           o.ThreadID,
		ThreadFrame:        o.ThreadFrame,
		CframeCurrentFrame: o.CFrameCurrentFrame,
		FramePrevious:      o.FramePrevious,
		FrameCode:          o.FrameCode,
		FrameInstruction:   o.FrameInstruction,
		FrameOwner:         o.FrameOwner,
		CodeAdaptive:       o.CodeAdaptive,
		InstructionKind:    uint8(o.InstructionKind),
		EntryKind:          uint8(o.EntryKind),
	}
	if o.ThreadFrameViaCFrame {
		p.ViaCframe = 1
	}
	return p
}
