package php

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestFPMLive runs Debian's php-fpm (foreground, a private pool of two
// static workers on a unix socket), asks it for phpwork.php through
// FastCGI and walks the busy worker's frames as TestWalkLive does, with
// and without opcache's tracing JIT; with the JIT, the worker (a fork of
// the master) has the master's JIT buffer, and gdb's stops in its JIT code
// unwind with JITFrame's row of php-fpm into zend_execute.
func TestFPMLive(t *testing.T) {
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			f, err := elf.Open(p.FPM)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			for _, mode := range []struct {
				name    string
				opcache bool
				jit     string
			}{
				{"interpreter", false, ""},
				{"jit-tracing", true, "tracing"},
			} {
				t.Run(mode.name, func(t *testing.T) {
					sock, master := testutil.StartFPM(t, p, p.Args(mode.opcache, mode.jit))
					go testutil.FastCGIGet(sock, testutil.Workload(t, "phpwork.php"), "seconds=20", time.Minute) //nolint:errcheck // ends with the test
					pid := busyWorker(t, in, master, p.FPM)
					want := 0
					if mode.jit != "" {
						want = 1
					}
					bufs := jitBuffers(t, pid, want)
					if mode.jit == "" {
						require.Empty(t, bufs)
						walkPID(t, in, pid, p.FPM, lines)
						return
					}
					require.Len(t, bufs, 1, "the worker's JIT buffer")
					walkPID(t, in, pid, p.FPM, lines)
					gdb, err := exec.LookPath("gdb")
					if err != nil || runtime.GOARCH != "amd64" {
						t.Logf("the JIT row is not checked in php-fpm (gdb for x86-64: %v)", err)
						return
					}
					row, zx := jitRowAndCaller(t, f)
					bias := testutil.LoadBias(t, pid, p.FPM)
					samples := gdbSamples(t, []string{gdb, "-p", strconv.Itoa(pid)},
						fmt.Sprintf("JLO=%x", bufs[0].Start), fmt.Sprintf("JHI=%x", bufs[0].End))
					checkJITSamples(t, row, samples, zx.Value+bias, zx.Value+zx.Size+bias, ^uint64(0))
				})
			}
		})
	}
}

// busyWorker returns the worker of master that runs a PHP frame, waiting
// for one.
func busyWorker(t *testing.T, in *Interpreter, master int, exe string) int {
	deadline := time.Now().Add(testutil.Patient(10 * time.Second))
	for time.Now().Before(deadline) {
		for _, pid := range testutil.FPMWorkers(t, master) {
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			if err != nil {
				continue
			}
			frames, _ := in.Layout.Walk(mem, in.ExecutorGlobals+testutil.LoadBias(t, pid, exe), 64)
			mem.Close()
			if len(frames) > 0 {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no worker of php-fpm %d runs PHP", master)
	return 0
}
