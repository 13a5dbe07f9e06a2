package assemble

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// evalFunction is CPython's native function that runs Python frames.
const evalFunction = "_PyEval_EvalFrameDefault"

// evalSymbols names user addresses 0xe0 to 0xef _PyEval_EvalFrameDefault,
// others "n<addr>", and Python frames "py<code>".
type evalSymbols struct{ fakeSymbols }

func (evalSymbols) User(_ uint32, addrs []uint64) []report.Frame {
	out := make([]report.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = report.Frame{Address: a, Function: fmt.Sprintf("n%x", a), Type: report.FrameNative}
		if a >= 0xe0 && a <= 0xef {
			out[i].Function = evalFunction
		}
	}
	return out
}

func (evalSymbols) Runtime(_ uint32, _ string, code uint64, _ uint32, _ uint64) []report.Frame {
	return []report.Frame{{Function: fmt.Sprintf("py%x", code), Type: report.FramePython}}
}

func TestWithPython(t *testing.T) {
	py := func(code uint64, entry bool) capture.Frame {
		return capture.Frame{Kind: capture.RuntimeFrame, Runtime: capture.CPython, Address: code, Entry: entry}
	}
	for _, tt := range []struct {
		name   string
		user   []uint64
		python []capture.Frame
		want   []string
	}{
		{"no python frames", []uint64{0x1, 0xe0, 0x2}, nil, []string{"n1", evalFunction, "n2"}},
		{"one frame per call (3.9, 3.10)", []uint64{0x1, 0xe0, 0x3, 0xe1, 0x2},
			[]capture.Frame{py(0xa, true), py(0xb, true)},
			[]string{"n1", "pya", "n3", "pyb", "n2"}},
		{"several frames in one call (3.11+)", []uint64{0x1, 0xe0, 0x3, 0xe1, 0x2},
			[]capture.Frame{py(0xa, false), py(0xb, true), py(0xc, false), py(0xd, true)},
			[]string{"n1", "pya", "pyb", "n3", "pyc", "pyd", "n2"}},
		{"native stack cut: the rest above its root", []uint64{0x1, 0xe0},
			[]capture.Frame{py(0xa, true), py(0xb, false), py(0xc, true)},
			[]string{"n1", "pya", "pyb", "pyc"}},
		{"more eval calls than runs keep their native frame", []uint64{0xe0, 0x3, 0xe1},
			[]capture.Frame{py(0xa, false)},
			[]string{"pya", "n3", evalFunction}},
		{"no native frames", nil, []capture.Frame{py(0xa, true), py(0xb, true)}, []string{"pya", "pyb"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := capture.RawStack{PID: 1, Frames: append(capture.StackFrames(nil, tt.user), tt.python...)}
			a := &Assembler{Symbols: &evalSymbols{}}
			var got []string
			for _, f := range a.frames(s, report.Identity{}, false) {
				got = append(got, f.Function)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// inPlaceSymbols names user addresses "n<addr>", 0x30 with an inlined
// frame "i30" before it, and runtime frames "rt<object>", but object 0 not.
type inPlaceSymbols struct{ evalSymbols }

func (inPlaceSymbols) User(_ uint32, addrs []uint64) []report.Frame {
	var out []report.Frame
	for _, a := range addrs {
		if a == 0x30 {
			out = append(out, report.Frame{Address: a, Function: "i30", Inlined: true})
		}
		out = append(out, report.Frame{Address: a, Function: fmt.Sprintf("n%x", a)})
	}
	return out
}

// Runtime names object rt<object>; object 0 not at all; an odd object
// (V8's tagged words) at native 0x50 with a function inlined there.
func (inPlaceSymbols) Runtime(_ uint32, _ string, object uint64, _ uint32, native uint64) []report.Frame {
	if object == 0 {
		return []report.Frame{{Type: report.FrameJVM}}
	}
	own := report.Frame{Function: fmt.Sprintf("rt%x", object), Type: report.FrameJVM}
	if object&1 != 0 && native == 0x50 {
		return []report.Frame{{Function: fmt.Sprintf("in%x", object), Type: report.FrameJVM, Inlined: true}, own}
	}
	return []report.Frame{own}
}

// A runtime frame the walk read in place takes the place of the native
// frame before it (and of the frames inlined into that one), in order from
// the leaf, the same address twice included; one that cannot be named
// leaves the native frame. A symbolizer that can skip addresses is not
// asked to look up the native frames that give way.
func TestRuntimeFramesInPlace(t *testing.T) {
	word := func(object uint64) uint64 { return 1<<63 | 1<<47 | object }
	for _, tt := range []struct {
		name    string
		user    []uint64
		want    []string
		lookups []uint64 // by a skipping symbolizer
	}{
		{"none", []uint64{0x10, 0x20}, []string{"n10", "n20"}, []uint64{0x10, 0x20}},
		{"one", []uint64{0x10, 0x20, word(0xa0), 0x40}, []string{"n10", "rta0", "n40"}, []uint64{0x10, 0x40}},
		{"the same native frame twice", []uint64{0x20, word(0xa0), 0x20, word(0xb0), 0x40}, []string{"rta0", "rtb0", "n40"}, []uint64{0x40}},
		{"with inlined frames", []uint64{0x10, 0x30, word(0xc0), 0x40}, []string{"n10", "rtc0", "n40"}, []uint64{0x10, 0x40}},
		{"not named", []uint64{0x10, 0x20, word(0), 0x40}, []string{"n10", "n20", "n40"}, []uint64{0x10, 0x20, 0x40}},
		{"a function inlined at its pc", []uint64{0x10, 0x50, word(0xd1), 0x40}, []string{"n10", "ind1", "rtd1", "n40"}, []uint64{0x10, 0x40}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := capture.RawStack{PID: 1, Frames: capture.StackFrames(nil, tt.user)}
			skipping := &skippingSymbols{}
			for _, sym := range []Symbolizer{&inPlaceSymbols{}, skipping} {
				a := &Assembler{Symbols: sym}
				var got []string
				for _, f := range a.frames(s, report.Identity{}, false) {
					got = append(got, f.Function)
				}
				require.Equal(t, tt.want, got, "%T", sym)
			}
			assert.Equal(t, tt.lookups, skipping.lookups)
		})
	}
}

// skippingSymbols is inPlaceSymbols that can skip addresses, and records
// those it looks up.
type skippingSymbols struct {
	inPlaceSymbols
	lookups []uint64
}

func (s *skippingSymbols) User(pid uint32, addrs []uint64) []report.Frame {
	return s.UserSkipping(pid, addrs, nil, false)
}

func (s *skippingSymbols) UserSkipping(pid uint32, addrs []uint64, skip []bool, _ bool) []report.Frame {
	var out []report.Frame
	for i, a := range addrs {
		if i < len(skip) && skip[i] {
			out = append(out, report.Frame{Address: a})
			continue
		}
		s.lookups = append(s.lookups, a)
		out = append(out, s.inPlaceSymbols.User(pid, addrs[i:i+1])...)
	}
	return out
}
