package probes

import (
	"fmt"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/gosites"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// goCode reports whether the functions probe s names in a Go binary are Go
// functions (timed per goroutine) or all C code linked in with cgo (timed
// per thread, as in any other file); a probe naming both is refused.
func goCode(funcs symbolize.ELFFunctions, s compiledSpec) (bool, error) {
	var goFuncs, cFuncs []string
	for _, fn := range funcs.Symbols {
		if !s.entry.match(fn.Name) && (s.Return || !s.exit.match(fn.Name)) {
			continue
		}
		if fn.Go {
			goFuncs = append(goFuncs, fn.Name)
		} else {
			cFuncs = append(cFuncs, fn.Name)
		}
	}
	if len(goFuncs) > 0 && len(cFuncs) > 0 {
		return false, fmt.Errorf("it names Go functions (%s) and C functions (%s): a scope is a goroutine's or a thread's",
			strings.Join(goFuncs, ", "), strings.Join(cFuncs, ", "))
	}
	return len(goFuncs) > 0, nil
}

// goSites returns where probe s's uprobes go in a Go binary: every one
// after its function's stack check (an uprobe on the first instruction
// fires again when the stack grows and the function starts over), and for
// a Spec with Return set the exit side on the function's return
// instructions, never a uretprobe. A function without a return, or whose
// code does not decode whole, refuses the probe for the file.
func goSites(funcs symbolize.ELFFunctions, s compiledSpec) (entry, exit []symOffset, err error) {
	entry, returns, err := goFunctionSites(funcs, s.entry)
	if err != nil || s.Return {
		return entry, returns, err
	}
	exit, _, err = goFunctionSites(funcs, s.exit)
	return entry, exit, err
}

// goFunctionSites returns the probe entry and the return instructions of
// each function of funcs q matches, as file offsets.
func goFunctionSites(funcs symbolize.ELFFunctions, q symbolQuery) (entry, returns []symOffset, err error) {
	for _, fn := range funcs.Symbols {
		if !q.match(fn.Name) {
			continue
		}
		if fn.Code == nil {
			return nil, nil, fmt.Errorf("%s: its %d bytes of code are more than %d or not in the file", fn.Name, fn.Size, symbolize.MaxGoCode)
		}
		sites, err := gosites.Find(funcs.Machine, fn.Value, fn.Code)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", fn.Name, err)
		}
		at := func(addr uint64) symOffset { return symOffset{name: fn.Name, offset: fn.Offset + addr - fn.Value} }
		entry = append(entry, at(sites.Entry))
		for _, r := range sites.Returns {
			returns = append(returns, at(r))
		}
	}
	return entry, returns, nil
}
