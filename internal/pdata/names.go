package pdata

import (
	"path"
	"strconv"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// addressName is the function name given to a frame the symbolizer could
// not name, so that backends that drop locations without a function
// (Grafana Pyroscope does) still show it, under a name that says where it
// is. It has the module+offset form of perf's "sym+0xoff" and of GDB's and
// kernel oopses' addresses, with the file's base name as module:
//
//   - in a mapped file: "<base name>+0x<file offset>", e.g.
//     "libc.so.6+0x8a1b3" (the offset in the file, stable across runs and
//     ASLR, what addr2line and objdump take after adding the segment's
//     virtual address);
//   - in the kernel: "[kernel.kallsyms]+0x<offset from its first symbol>"
//     or "[<module>]+0x<offset from the module's first symbol>", stable
//     across KASLR for one kernel build;
//   - in a mapping without a file name (anonymous JIT code) or outside every
//     mapping (a kernel address outside the image and all modules, such as
//     a BPF trampoline): "0x<address>".
//
// The location keeps its address and mapping (with the build id) either
// way, and the function gets no system name: a backend or tool can tell
// the name was made up for display (FunctionTotals skips such names).
func addressName(f report.Frame) string {
	m := f.Mapping
	if m == nil || m.File == "" || f.Address < m.Start {
		return "0x" + strconv.FormatUint(f.Address, 16)
	}
	return path.Base(m.File) + "+0x" + strconv.FormatUint(f.Address-m.Start+m.Offset, 16)
}
