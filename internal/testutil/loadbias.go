package testutil

import (
	"debug/elf"
	"path/filepath"
	"testing"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// LoadBias returns the load bias of the ELF file at path in process pid
// (where the process maps it less its link-time addresses), from the
// mapping of its first page; it waits up to 5 seconds for the file to be
// mapped (a library loaded as the program starts).
func LoadBias(t testing.TB, pid int, path string) uint64 {
	t.Helper()
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(real)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var first *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			first = p
			break
		}
	}
	if first == nil {
		t.Fatalf("%s: no PT_LOAD at file offset 0", real)
	}
	vaddr := first.Vaddr
	if first.Align > 1 {
		vaddr &^= first.Align - 1
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		maps, err := procfs.Default.Maps(uint32(pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Path == real && m.Offset == 0 {
				return m.Start - vaddr
			}
		}
	}
	t.Fatalf("%s is not mapped in pid %d", real, pid)
	return 0
}
