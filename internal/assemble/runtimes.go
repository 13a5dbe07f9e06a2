package assemble

import (
	"strings"

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
	native = a.inPlace(s, native)
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
		if rt, ok := entries[cloneOf(f.Function)]; ok && !f.Inlined && len(runs[rt]) > 0 {
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

// cloneOf returns the function a compiler's clone or part of it is named
// after: "f.cold", "f.part.0", "f.constprop.0", "f.isra.0" are f (GCC
// names them so in a file's symbol table).
func cloneOf(name string) string {
	base, _, _ := strings.Cut(name, ".")
	return base
}

// inPlace puts each runtime frame the walk read in place (capture.Frame.
// Native) where the native frame it names is, in order from the leaf: the
// native frame (with the frames symbolized as inlined into it) gives way to
// the runtime's, unless the runtime frame could not be named.
func (a *Assembler) inPlace(s capture.RawStack, native []report.Frame) []report.Frame {
	var queue []capture.Frame
	for _, f := range s.Frames {
		if f.Kind == capture.RuntimeFrame && f.Native != 0 {
			queue = append(queue, f)
		}
	}
	if len(queue) == 0 {
		return native
	}
	out := make([]report.Frame, 0, len(native)+len(queue))
	start := 0 // the first frame of the current native frame's group
	for i, f := range native {
		if f.Inlined {
			continue // the group ends with its outermost frame
		}
		group := native[start : i+1]
		start = i + 1
		if len(queue) > 0 && f.Address == queue[0].Native {
			run := a.runtimeFrames(s.PID, queue[:1])
			queue = queue[1:]
			if named(run) {
				out = append(out, run...)
				continue
			}
		}
		out = append(out, group...)
	}
	return append(out, native[start:]...)
}

// runtimeRuns splits the runtime frames of stack frames into the runs of
// one call of their runtime's entry function each, leaf first, by runtime;
// order lists the runtimes as they first appear.
func runtimeRuns(frames []capture.Frame) (runs map[capture.Runtime][][]capture.Frame, order []capture.Runtime) {
	start := map[capture.Runtime]int{}
	var pending [][]capture.Frame // the current run of each runtime, by index in order
	for _, f := range frames {
		if f.Kind != capture.RuntimeFrame || f.Native != 0 {
			continue // in place: see inPlace
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
		out = append(out, a.Symbols.Runtime(pid, f.Runtime.Name(), f.Address, f.Position, f.Native)...)
	}
	return out
}
