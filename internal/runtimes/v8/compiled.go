package v8

import (
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Compiled names the frame of the SharedFunctionInfo sfi running compiled
// code at pc (a return address, or the interrupted pc of a leaf): the line
// the code's source positions give there and, in optimized code, the
// functions inlined there, innermost first. function names a function
// (Frame at position 0, or what the caller cached of it). Without the code
// (not found, baseline code, no positions), the function's frame.
func (n *Namer) Compiled(sfi, pc uint64, now time.Time, function func(sfi uint64) (runtimes.Frame, error)) (runtimes.Frame, error) {
	own, err := function(sfi)
	if err != nil || n.codes == nil || own.File == "" {
		return own, err // a builtin (no script) runs no code of its own
	}
	code, err := n.codes.at(pc, now)
	if err != nil || len(code.positions) == 0 {
		return own, nil
	}
	off := int32(pc - code.start)
	if off > 0 {
		off-- // a return address: the call is before it
	}
	raw, ok := rawAt(code.positions, off)
	if !ok {
		return own, nil
	}
	var inlined []runtimes.Frame
	for range maxInlineDepth {
		id := inliningID(raw)
		if id < 0 || int(id) >= len(code.inlining) {
			break
		}
		at := code.inlining[id]
		fn, err := n.codes.inlined(code, at.function)
		if err != nil {
			break
		}
		f, err := function(fn)
		if err != nil {
			break
		}
		if line := n.lineAt(fn, scriptOffset(raw), now); line > 0 {
			f.Line = line
		}
		inlined = append(inlined, f)
		raw = at.caller
	}
	if inliningID(raw) < 0 {
		if line := n.lineAt(sfi, scriptOffset(raw), now); line > 0 {
			own.Line = line
		}
	}
	own.Inlined = inlined
	return own, nil
}

// lineAt returns the line of script offset pos in the script of sfi; 0
// when unknown.
func (n *Namer) lineAt(sfi uint64, pos int32, now time.Time) int64 {
	if pos < 0 {
		return 0
	}
	scr, err := n.scriptOf(sfi)
	if err != nil || scr == 0 {
		return 0
	}
	s, err := n.script(scr, now)
	if err != nil || s.ends == nil {
		return 0
	}
	return lineOf(s.ends, pos)
}
