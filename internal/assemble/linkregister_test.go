package assemble

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// functionSymbols names a user address by the function whose range holds
// it (a return address, not the leaf, by the call before it); unnamed
// outside them.
type functionSymbols struct{ fakeSymbols }

var linkFunctions = []struct {
	low, high uint64
	name      string
}{{0x1000, 0x1100, "hot_a"}, {0x2000, 0x2100, "burn"}, {0x3000, 0x3100, "start_thread"}}

func (f *functionSymbols) User(_ uint32, addrs []uint64) []report.Frame {
	out := make([]report.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = report.Frame{Address: a, Type: report.FrameNative}
		look := a
		if i > 0 {
			look--
		}
		for _, fn := range linkFunctions {
			if look >= fn.low && look < fn.high {
				out[i].Function = fn.name
			}
		}
	}
	return out
}

func (f *functionSymbols) UserExited(pid uint32, addrs []uint64) []report.Frame {
	return f.User(pid, addrs)
}

// arm64's x30 after a frame-pointer stack's leaf is its caller where it is
// in another named function; a return address into the leaf itself (the
// leaf has called something), an unnamed one, or none leaves the frame
// records' stack as it is.
func TestLinkRegisterCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		user []uint64
		want []string
	}{
		{"leaf without a frame record", []uint64{0x1010, 0x7f<<56 | 0x2020, 0x3030}, []string{"hot_a", "burn", "start_thread"}},
		{"after a call of its own", []uint64{0x1010, 0x7f<<56 | 0x1040, 0x2020, 0x3030}, []string{"hot_a", "burn", "start_thread"}},
		{"unnamed x30", []uint64{0x1010, 0x7f<<56 | 0x9000, 0x3030}, []string{"hot_a", "start_thread"}},
		{"unnamed leaf", []uint64{0x9010, 0x7f<<56 | 0x2020, 0x3030}, []string{"", "start_thread"}},
		{"x86-64 and tables' stacks: no x30", []uint64{0x1010, 0x2020, 0x3030}, []string{"hot_a", "burn", "start_thread"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Assembler{Symbols: &functionSymbols{}, Identities: fakeIdentities{10: "/bin/a"}}
			stacks := []capture.RawStack{{PID: 10, TID: 10, Frames: capture.StackFrames(nil, tc.user), Value: 1}}
			prof, _ := a.Assemble(report.KindCPU, time.Time{}, time.Time{}, 0, stacks)
			require.Len(t, prof.Processes, 1)
			require.Len(t, prof.Processes[0].Samples, 1)
			var got []string
			for _, f := range prof.Processes[0].Samples[0].Frames {
				got = append(got, f.Function)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
