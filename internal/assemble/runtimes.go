package assemble

import (
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/all"
)

// withRuntimes puts the runtime frames of s into its native user frames
// (leaf first): each run of a runtime's frames that one call of its native
// entry function ran (capture.Frame.Entry ends a run) takes the place of
// that call's native frame, in order from the leaf. Runs left over when
// the native stack ends (it was cut, or walked with frame pointers through
// an interpreter that has none) go above its root, so no frame is lost.
func (a *Assembler) withRuntimes(s capture.RawStack, native []report.Frame) []report.Frame {
	runs, order := runtimeRuns(s.Frames)
	if len(order) == 0 {
		return native
	}
	entries := make(map[string]capture.Runtime, len(order))
	for _, rt := range order {
		if r := all.ByName(rt.Name()); r != nil && r.EntryFunction != "" {
			entries[r.EntryFunction] = rt
		}
	}
	out := make([]report.Frame, 0, len(native)+len(s.Frames))
	for _, f := range native {
		if rt, ok := entries[f.Function]; ok && !f.Inlined && len(runs[rt]) > 0 {
			run := a.runtimeFrames(s.PID, runs[rt][0])
			runs[rt] = runs[rt][1:]
			if named(run) {
				out = append(out, run...)
				continue
			}
		}
		out = append(out, f)
	}
	for _, rt := range order {
		for _, run := range runs[rt] {
			out = append(out, a.runtimeFrames(s.PID, run)...)
		}
	}
	return out
}

// runtimeRuns splits the runtime frames of stack frames into the runs of
// one call of their runtime's entry function each, leaf first, by runtime;
// order lists the runtimes as they first appear.
func runtimeRuns(frames []capture.Frame) (runs map[capture.Runtime][][]capture.Frame, order []capture.Runtime) {
	start := map[capture.Runtime]int{}
	var pending [][]capture.Frame // the current run of each runtime, by index in order
	for _, f := range frames {
		if f.Kind != capture.RuntimeFrame {
			continue
		}
		i, ok := start[f.Runtime]
		if !ok {
			i = len(order)
			start[f.Runtime] = i
			order = append(order, f.Runtime)
			pending = append(pending, nil)
			if runs == nil {
				runs = map[capture.Runtime][][]capture.Frame{}
			}
		}
		pending[i] = append(pending[i], f)
		if f.Entry {
			runs[f.Runtime] = append(runs[f.Runtime], pending[i])
			pending[i] = nil
		}
	}
	for i, rt := range order {
		if len(pending[i]) > 0 {
			runs[rt] = append(runs[rt], pending[i])
		}
	}
	return runs, order
}

// named says whether any frame of run has a name: a run of none keeps the
// native frame it would replace.
func named(run []report.Frame) bool {
	for _, f := range run {
		if f.Function != "" {
			return true
		}
	}
	return false
}

func (a *Assembler) runtimeFrames(pid uint32, run []capture.Frame) []report.Frame {
	out := make([]report.Frame, 0, len(run))
	for _, f := range run {
		out = append(out, a.Symbols.Runtime(pid, f.Runtime.Name(), f.Address, f.Position))
	}
	return out
}
