package symbolize

import (
	"sync"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// maxVDSOBytes bounds the vDSO image read (a few pages on every kernel).
const maxVDSOBytes = 1 << 20

// vdsoImage is the running kernel's vDSO as the collector maps it: every
// process of the kernel maps the same image (one per ABI), in no file, so
// its symbols (its own .dynsym: __vdso_clock_gettime on x86-64,
// __kernel_clock_gettime on arm64) are read once, from the collector's own
// mapping, and name the frames of a process's [vdso] mapping of the same
// size.
type vdsoImage struct {
	once sync.Once
	ef   *elfFile // nil: not read
	size uint64
}

// name returns the function at offset off of a [vdso] mapping of size
// bytes, or "".
func (v *vdsoImage) name(size, off uint64) string {
	v.once.Do(v.load)
	if v.ef == nil || size != v.size {
		return ""
	}
	vaddr, ok := v.ef.vaddr(off)
	if !ok {
		return ""
	}
	return v.ef.symbol(vaddr)
}

// load reads and parses the collector's own vDSO; on any failure frames of
// the vDSO keep their addresses.
func (v *vdsoImage) load() {
	data, err := readOwnVDSO()
	if err != nil || uint64(len(data)) > maxVDSOBytes {
		return
	}
	var ef *elfFile
	// debug/elf may panic on malformed input (not expected of the kernel's).
	if withFaultPanic(func() { ef, err = parseELF(data) }) != nil || err != nil {
		return
	}
	v.ef, v.size = ef, uint64(len(data))
}

// isVDSO says whether m is a process's vDSO mapping.
func isVDSO(m procfs.Map) bool { return m.Path == "[vdso]" }
