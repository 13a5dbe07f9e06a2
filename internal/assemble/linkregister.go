package assemble

import (
	"slices"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// withLinkRegister puts arm64's x30, when s carries it (a
// capture.LinkRegisterFrame: bpf/cpu.bpf.c took the stack by frame
// pointers), after the leaf of addrs (the user addresses of s) where it is
// the leaf's caller: a return address in a named function other than the
// leaf's. After a call x30 points into the leaf's own function, whose
// frame record holds its caller already; an address without a name cannot
// tell, and the frame records' stack stands.
func (a *Assembler) withLinkRegister(s capture.RawStack, addrs []uint64, exited bool) []uint64 {
	i := slices.IndexFunc(s.Frames, func(f capture.Frame) bool { return f.Kind == capture.LinkRegisterFrame })
	if i < 0 || len(addrs) == 0 {
		return addrs
	}
	lr := s.Frames[i].Address
	pair := []uint64{addrs[0], lr}
	var named []report.Frame
	if exited {
		named = a.Symbols.UserExited(s.PID, pair)
	} else {
		named = a.Symbols.User(s.PID, pair)
	}
	leaf, caller := outermostFunction(named, addrs[0]), outermostFunction(named, lr)
	if leaf == "" || caller == "" || leaf == caller {
		return addrs
	}
	return slices.Insert(slices.Clone(addrs), 1, lr)
}

// outermostFunction is the function of the last frame of addr in frames
// (an address's frames are its inlined calls, the function holding them
// last); "" when it has none or no name.
func outermostFunction(frames []report.Frame, addr uint64) string {
	name := ""
	for _, f := range frames {
		if f.Address == addr {
			name = f.Function
		}
	}
	return name
}
