//go:build linux

package unwinder

import (
	"debug/elf"
	"fmt"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// JIT code that runs on its runtime's entry function's frame (PHP's
// opcache JIT, runtimes.Runtime.JITFrame) is unwound by one row: the
// engine file's table gets it appended at jitPC, a file address past every
// segment of the file, and each mapping of such code in a process running
// that file points at the same table with a bias that puts the mapping's
// first byte at jitPC. Every pc in the mapping finds that row (the last),
// so the walk goes on through the entry function's caller.

// jitRowPC is the file address of the JIT row of a file with progs: the
// page after its highest segment.
func jitRowPC(progs []elf.ProgHeader) uint64 {
	var end uint64
	for _, p := range progs {
		if p.Type == elf.PT_LOAD {
			end = max(end, p.Vaddr+p.Memsz)
		}
	}
	const page = 1 << 12
	return (end + 2*page - 1) &^ (page - 1)
}

// withJITRow appends to rows, f's table from base, the row of its
// runtime's JIT code at pc (a file address), or says why it cannot.
func withJITRow(f *elf.File, fr *fileRuntime, rows []bpf.CpuUnwindRow, base, pc uint64) ([]bpf.CpuUnwindRow, error) {
	convert := kernelRowOf(f.Machine)
	if convert == nil || pc < base || pc-base >= maxTableLength {
		return rows, fmt.Errorf("%s JIT row at %#x: outside the table from %#x", fr.rt.Name, pc, base)
	}
	all, err := cfi.BuildRows(f)
	if err != nil {
		return rows, fmt.Errorf("%s JIT row: %w", fr.rt.Name, err)
	}
	row, err := fr.rt.JITFrame(f, all.All())
	if err != nil {
		return rows, err
	}
	kr := convert(row)
	if kr.Rule&ruleKindMask != uint32(cfi.KindCFA) {
		return rows, fmt.Errorf("%s JIT row %+v: the kernel's layout cannot hold it", fr.rt.Name, row)
	}
	kr.Pc = uint32(pc - base)
	return append(rows, kr), nil
}

// ruleKindMask is the kind bits of a row's rule (bpf/unwind.h).
const ruleKindMask = 7

// jitEngine returns, of a process's file tables (one per mapping, nil
// for the others), the one whose runtime runs JIT code on its entry
// function's frame, or nil.
func jitEngine(tables []*fileTable) *fileTable {
	for _, t := range tables {
		if t != nil && t.jitPC != 0 {
			return t
		}
	}
	return nil
}

// jitMapping says whether m, an anonymous executable mapping of a process
// whose engine is e, holds e's runtime's JIT code, and its bias (table pc
// = address - bias - table base) if so.
func jitMapping(e *fileTable, m procfs.Map) (uint64, bool) {
	if e == nil || e.runtime.rt.EntryCode == nil || !e.runtime.rt.EntryCode(m) {
		return 0, false
	}
	return m.Start - e.jitPC, true
}

// jitCode returns the entry of m, an anonymous executable mapping of lp
// (value as it is), and its file: the engine's table's JIT row where m
// holds the engine's runtime's JIT code and the row is there; the build
// m waits for where the table is still to build.
func (l *Loader) jitCode(lp *loadedProcess, engine *fileTable, engineKey fileKey, m procfs.Map, value bpf.CpuUnwindMapping) (bpf.CpuUnwindMapping, fileKey, *pendingBuild) {
	bias, ok := jitMapping(engine, m)
	switch {
	case !ok:
	case engine.rows > 0 && engine.jitRow && jitFits(engine, m.Start, m.End):
		return bpf.CpuUnwindMapping{Bias: bias + engine.base, Table: engine.slot, Rows: engine.rows, Runtime: lp.inPlace}, engineKey, nil
	case engine.building != nil:
		w := engine.building
		w.waiters = append(w.waiters, waiter{lp: lp, first: len(lp.keys), bias: bias, key: engineKey, jit: [2]uint64{m.Start, m.End}})
		lp.building++
		return value, fileKey{}, w
	}
	return value, fileKey{}, nil
}

// jitFits says whether every pc of [start, end) is a table pc of t's JIT
// row: within the 32 bits of a row's pc.
func jitFits(t *fileTable, start, end uint64) bool {
	return t.jitPC >= t.base && t.jitPC-t.base+(end-start) <= maxTableLength
}
