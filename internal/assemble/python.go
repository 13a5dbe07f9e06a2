package assemble

import (
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// evalFunction is CPython's native function that runs Python frames
// (3.9 to 3.13); each of its calls runs the Python frames of one run of
// s's Python frames (capture.Frame.EvalEntry ends a run).
const evalFunction = "_PyEval_EvalFrameDefault"

// withPython puts the Python frames of s into its native user frames
// (leaf first): each run of Python frames one call of the interpreter ran
// takes the place of that call's native frame, in order from the leaf.
// Runs left over when the native stack ends (it was cut, or walked with
// frame pointers through an interpreter that has none) go above its root,
// so no Python frame is lost.
func (a *Assembler) withPython(s capture.RawStack, native []report.Frame) []report.Frame {
	runs := pythonRuns(s.Frames)
	if len(runs) == 0 {
		return native
	}
	out := make([]report.Frame, 0, len(native)+len(s.Frames))
	for _, f := range native {
		if f.Function == evalFunction && !f.Inlined && len(runs) > 0 {
			out = append(out, a.pythonFrames(s.PID, runs[0])...)
			runs = runs[1:]
			continue
		}
		out = append(out, f)
	}
	for _, run := range runs {
		out = append(out, a.pythonFrames(s.PID, run)...)
	}
	return out
}

// pythonRuns splits the Python frames of stack frames into the runs of
// one interpreter call each, leaf first.
func pythonRuns(frames []capture.Frame) [][]capture.Frame {
	var runs [][]capture.Frame
	start := -1
	for i, f := range frames {
		if f.Kind != capture.PythonFrame {
			continue
		}
		if start < 0 {
			start = i
		}
		if f.EvalEntry {
			runs = append(runs, frames[start:i+1])
			start = -1
		}
	}
	if start >= 0 {
		runs = append(runs, frames[start:])
	}
	return runs
}

func (a *Assembler) pythonFrames(pid uint32, run []capture.Frame) []report.Frame {
	out := make([]report.Frame, 0, len(run))
	for _, f := range run {
		out = append(out, a.Symbols.Python(pid, f.Address, f.Instruction))
	}
	return out
}
