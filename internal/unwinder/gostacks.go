package unwinder

import (
	"debug/elf"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
)

// Go's .debug_frame gives each function's CFA and return address, never
// where it saved rbp: every Go function with a frame pushes rbp at CFA-16
// first thing (the frame pointer Go keeps for unwinders), and pops it last.
// Without that a table walk through Go frames keeps the leaf's rbp, which is
// wrong as soon as a frame is walked by rbp.
//
// And Go runs some work on the thread's system stack (g0): systemstack and
// asmcgocall push rbp, switch rsp to g0's stack and call the function
// there. Their CFA, given by rsp, then points into the other stack: a walk
// that follows it reads a word of g0's stack as the return address and ends
// in no mapping. Their rbp still chains to the goroutine's frames: walked
// by rbp wherever that stack is (cfi.KindSwitch), the stack goes on into
// the function that switched.
var goStackSwitches = map[string]bool{
	"runtime.systemstack.abi0": true, "runtime.systemstack": true,
	"runtime.asmcgocall.abi0": true, "runtime.asmcgocall": true,
}

// withGoFrames amends rows (sorted by PC) for Go code in f, a Go program's
// text between runtime.text and runtime.etext: rows whose frame has pushed
// rbp (a CFA of rsp+16 or more) say it is at CFA-16, and those of the
// stack-switching functions are cfi.KindSwitch. Rows of any other file, or of code
// outside Go's text (cgo's C code), are left as they are.
func withGoFrames(f *elf.File, rows []cfi.Row) []cfi.Row {
	if len(rows) == 0 || f.Section(".gopclntab") == nil {
		return rows
	}
	syms, err := f.Symbols()
	if err != nil {
		return rows
	}
	var text, etext uint64
	var switches [][2]uint64
	for _, s := range syms {
		switch {
		case s.Name == "runtime.text":
			text = s.Value
		case s.Name == "runtime.etext":
			etext = s.Value
		case goStackSwitches[s.Name] && s.Size > 0 && elf.ST_TYPE(s.Info) == elf.STT_FUNC:
			switches = append(switches, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
	if text == 0 || etext <= text {
		return rows
	}
	for i := range rows {
		r := &rows[i]
		if r.PC < text || r.PC >= etext || r.Kind != cfi.KindCFA || r.CFAReg != cfi.RegSP || r.CFAOffset < 16 || r.FPOffset != 0 {
			continue
		}
		r.FPOffset = -16
		for _, sw := range switches {
			if r.PC >= sw[0] && r.PC < sw[1] {
				*r = cfi.Row{PC: r.PC, Kind: cfi.KindSwitch}
			}
		}
	}
	return rows
}
