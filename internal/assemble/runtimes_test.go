package assemble

import (
	"fmt"
	"testing"

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

func (evalSymbols) Runtime(_ uint32, _ string, code uint64, _ uint32) report.Frame {
	return report.Frame{Function: fmt.Sprintf("py%x", code), Type: report.FramePython}
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
