package testutil

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// USDTSemaphore reads the 16-bit USDT semaphore at link-time address addr
// of the ELF file at path from the memory of process pid, which maps it:
// the count of uprobes attached to its probe.
func USDTSemaphore(t testing.TB, pid int, path string, addr uint64) uint16 {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var b [2]byte
	if _, err := mem.ReadAt(b[:], int64(LoadBias(t, pid, path)+addr)); err != nil {
		t.Fatal(err)
	}
	return binary.NativeEndian.Uint16(b[:])
}
