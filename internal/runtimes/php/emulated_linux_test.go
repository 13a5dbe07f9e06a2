package php

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestWalkEmulated is TestWalkLive for Debian's arm64 PHP run under
// qemu-user on this machine: the arm64 layouts (the same numbers as
// amd64's) walk a live arm64 engine's memory, with and without opcache.
// opcache's JIT is left out: under qemu it is arm64 code translated
// again, nothing of the machine's.
func TestWalkEmulated(t *testing.T) {
	const arch = "arm64"
	if runtime.GOARCH == arch {
		t.Skip("TestWalkLive walks arm64 natively")
	}
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(arch+"/"+v, func(t *testing.T) {
			p, qemu := testutil.EmulatedPHP(t, arch, v)
			f, err := elf.Open(p.Path)
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, elf.EM_AARCH64, f.Machine)
			in, err := Detect(f)
			require.NoError(t, err)
			for _, mode := range []struct {
				name    string
				opcache bool
			}{
				{"interpreter", false},
				{"opcache", true},
			} {
				t.Run(mode.name, func(t *testing.T) {
					args := append(append(append(qemu[1:], p.Path), p.Args(mode.opcache, "")...), testutil.Workload(t, "phpwork.php"), "60")
					cmd := testutil.StartReadyWorkload(t, qemu[0], args...)
					walkPID(t, in, cmd.Process.Pid, p.Path, lines)
				})
			}
		})
	}
}

// TestJITFrameEmulated is TestJITFrameLive for Debian's arm64 PHP run
// under qemu-user, stopped through qemu's gdb stub by gdb-multiarch: the
// arm64 JIT (translated by qemu, but its own code and stack all the same)
// lowers sp below execute_ex's and keeps x29, which JITFrame's row
// unwinds from. Return addresses may be signed (8.4's execute_ex starts
// with paciasp): the top 16 bits are masked.
func TestJITFrameEmulated(t *testing.T) {
	const arch = "arm64"
	if runtime.GOARCH == arch {
		t.Skip("TestJITFrameLive runs arm64 natively")
	}
	gdb, err := exec.LookPath("gdb-multiarch")
	if err != nil {
		testutil.SkipOrFail(t, "no gdb-multiarch: %v", err)
	}
	for _, v := range testutil.PHPVersions {
		t.Run(arch+"/"+v, func(t *testing.T) {
			p, qemu := testutil.EmulatedPHP(t, arch, v)
			f, err := elf.Open(p.Path)
			require.NoError(t, err)
			defer f.Close()
			row, zx := jitRowAndCaller(t, f)
			for _, c := range []struct{ workload, jit string }{
				{"phpwork.php", "function"},
				{"phpwork.php", "tracing"},
				{"phpjitcalls.php", "function"},
				{"phpjitcalls.php", "tracing"},
			} {
				if c.workload != "phpwork.php" && signsReturns(t, f) {
					// Not a case: qemu's stub gives gdb no pointer
					// authentication mask, so gdb cannot unwind native
					// code called from JIT code through signed return
					// addresses (8.4's execute_ex starts with paciasp).
					continue
				}
				t.Run(c.workload+"/"+c.jit, func(t *testing.T) {
					port := freePort(t)
					args := append(append(append(append([]string{}, qemu[1:]...), "-g", strconv.Itoa(port), p.Path),
						p.Args(true, c.jit)...), testutil.Workload(t, c.workload), "60")
					cmd := testutil.StartWorkload(t, qemu[0], args...) // waits for gdb
					pid := cmd.Process.Pid
					waitMapped(t, pid, p.Path)
					bias := testutil.LoadBias(t, pid, p.Path)
					// The program's and its libraries' CFI for gdb: qemu's stub names
					// neither.
					samples := gdbSamples(t, []string{gdb, "-ex", "set sysroot " + qemu[2], "-ex", "file " + p.Path,
						"-ex", fmt.Sprintf("target remote 127.0.0.1:%d", port)},
						"QPID="+strconv.Itoa(pid), "SPREG=sp", "FPREG=x29", "WARMUP=3")
					checkJITSamples(t, row, samples, zx.Value+bias, zx.Value+zx.Size+bias, 1<<48-1)
				})
			}
		})
	}
}

// freePort returns a TCP port of 127.0.0.1 nothing listened on a moment
// ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitMapped waits for file to be mapped in pid (qemu-user loads its
// guest program at start).
func waitMapped(t *testing.T, pid int, file string) {
	deadline := time.Now().Add(testutil.Patient(10 * time.Second))
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		require.NoError(t, err)
		if strings.Contains(string(b), " "+file+"\n") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s is not mapped in %d", file, pid)
}

// signsReturns reports whether f's execute_ex starts with paciasp (the
// engine is built with return address signing).
func signsReturns(t *testing.T, f *elf.File) bool {
	syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: []string{entryFunction}})
	require.NoError(t, err)
	require.Len(t, syms, 1)
	var insn [4]byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr <= syms[0].Value && syms[0].Value+4 <= p.Vaddr+p.Filesz {
			_, err := p.ReadAt(insn[:], int64(syms[0].Value-p.Vaddr))
			require.NoError(t, err)
		}
	}
	return binary.LittleEndian.Uint32(insn[:]) == 0xd503233f // paciasp
}
