package php

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/cfi"
	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// jitSamples is how many times TestJITFrameLive stops a process.
const jitSamples = 12

// TestJITBuffersLive finds the JIT buffer in phpwork.php's mappings with
// the JIT on (one executable piece) and none with it off or without
// opcache.
func TestJITBuffersLive(t *testing.T) {
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			for _, c := range []struct {
				name    string
				opcache bool
				jit     string
				want    int
			}{
				{"interpreter", false, "", 0},
				{"opcache", true, "", 0},
				{"jit-function", true, "function", 1},
				{"jit-tracing", true, "tracing", 1},
			} {
				t.Run(c.name, func(t *testing.T) {
					cmd := testutil.StartPHP(t, p, p.Args(c.opcache, c.jit), "30")
					bufs := jitBuffers(t, cmd.Process.Pid, c.want)
					require.Len(t, bufs, c.want, "%v", bufs)
					for _, b := range bufs {
						require.Equal(t, uint64(64<<20), b.End-b.Start, "the buffer is opcache.jit_buffer_size")
					}
				})
			}
		})
	}
}

// TestJITFrameLive stops phpwork.php (a JIT'd loop calling nothing) and
// phpjitcalls.php (JIT code calling internal functions and the engine's
// helpers) in JIT code with gdb (batch mode, no ptrace from the test):
// at every stop, the innermost frame whose pc is in the JIT buffer (gdb
// unwinds the helpers under it through their CFI) must unwind with
// JITFrame's row: the word at CFA+RAOffset is a return address into
// zend_execute, execute_ex's caller in the CLI.
func TestJITFrameLive(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the gdb script reads x86-64 registers")
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		testutil.SkipOrFail(t, "no gdb: %v", err)
	}
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
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
				t.Run(c.workload+"/"+c.jit, func(t *testing.T) {
					flags := append(p.Args(true, c.jit), testutil.Workload(t, c.workload), "30")
					cmd := testutil.StartReadyWorkload(t, p.Path, flags...)
					pid := cmd.Process.Pid
					time.Sleep(500 * time.Millisecond) // past the JIT's warm-up
					bufs := jitBuffers(t, pid, 1)
					require.Len(t, bufs, 1)
					bias := testutil.LoadBias(t, pid, p.Path)
					samples := gdbSamples(t, []string{gdb, "-p", strconv.Itoa(pid)},
						fmt.Sprintf("JLO=%x", bufs[0].Start), fmt.Sprintf("JHI=%x", bufs[0].End))
					checkJITSamples(t, row, samples, zx.Value+bias, zx.Value+zx.Size+bias, ^uint64(0))
				})
			}
		})
	}
}

// jitRowAndCaller returns f's JITFrame and its zend_execute (execute_ex's
// caller in the CLI).
func jitRowAndCaller(t *testing.T, f *elf.File) (cfi.Row, elfsym.Symbol) {
	row, err := jitFrameOf(f)
	require.NoError(t, err)
	t.Logf("JIT row: %+v", row)
	zx, err := elfsym.Lookup(f, elf.SHT_DYNSYM, elfsym.Match{Names: []string{"zend_execute"}})
	require.NoError(t, err)
	require.Len(t, zx, 1)
	return row, zx[0]
}

// checkJITSamples checks that row unwinds the JIT frame of each sample
// into [lo, hi) (zend_execute, loaded): the word at CFA+RAOffset, masked
// with mask (arm64's return addresses may be signed), is there. Most
// samples must have a JIT frame.
func checkJITSamples(t *testing.T, row cfi.Row, samples []gdbSample, lo, hi, mask uint64) {
	inJIT, inHelpers := 0, 0
	for _, s := range samples {
		if s.words == nil {
			t.Logf("stop at %#x: no JIT frame", s.leaf)
			continue
		}
		inJIT++
		if s.depth > 0 {
			inHelpers++
		}
		base := s.sp
		if row.CFAReg == cfi.RegFP {
			base = s.bp
		}
		ra := base + uint64(int64(row.CFAOffset)+int64(row.RAOffset))
		i := (ra - s.sp) / 8
		require.Less(t, i, uint64(len(s.words)), "the return address's slot is past the words read")
		w := s.words[i] & mask
		require.True(t, lo <= w && w < hi,
			"stop at %#x (JIT pc %#x, %d frames in, sp %#x, fp %#x): the word at CFA%+d is %#x, not in zend_execute [%#x, %#x)",
			s.leaf, s.pc, s.depth, s.sp, s.bp, row.RAOffset, s.words[i], lo, hi)
	}
	t.Logf("%d of %d stops in JIT code (%d in native code it called), each unwound into zend_execute", inJIT, len(samples), inHelpers)
	require.GreaterOrEqual(t, inJIT, len(samples)/2)
}

// gdbSample is one stop: the leaf pc and, when a frame is in the JIT
// buffer, that frame's pc, depth, rsp, rbp and 40 words from rsp.
type gdbSample struct {
	leaf, pc, sp, bp uint64
	depth            int
	words            []uint64
}

// gdbSamples runs gdb (gdb and its arguments: the process to attach to)
// with testdata/gdbsample.py and env, for jitSamples stops.
func gdbSamples(t *testing.T, gdb []string, env ...string) []gdbSample {
	script, err := filepath.Abs("testdata/gdbsample.py")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patient(90*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, gdb[0], append(append([]string{"-batch", "-nx"}, gdb[1:]...), "-ex", "source "+script)...)
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("NS=%d", jitSamples)), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var samples []gdbSample
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "S ") {
			continue
		}
		var s gdbSample
		fields := strings.Fields(l)
		for i, fl := range fields[1:] {
			if fl == "W" {
				for _, w := range fields[i+2:] {
					n, err := strconv.ParseUint(w, 16, 64)
					require.NoError(t, err, l)
					s.words = append(s.words, n)
				}
				break
			}
			k, val, _ := strings.Cut(fl, "=")
			n, _ := strconv.ParseUint(val, 16, 64)
			switch k {
			case "leaf":
				s.leaf = n
			case "pc":
				s.pc = n
			case "sp":
				s.sp = n
			case "bp":
				s.bp = n
			case "depth":
				s.depth = int(n)
			}
		}
		samples = append(samples, s)
	}
	require.Len(t, samples, jitSamples, "%s", out)
	return samples
}

// jitBuffers returns JITBuffers of pid's mappings once it finds want of
// them, or what it last found at a deadline. While the JIT compiles (the
// tracing JIT does so whenever a loop or call gets hot) the buffer is
// writable and not executable; it is executable again when it is done.
func jitBuffers(t *testing.T, pid, want int) []procfs.Map {
	bufs := JITBuffers(readMaps(t, pid))
	for deadline := time.Now().Add(10 * time.Second); len(bufs) < want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		bufs = JITBuffers(readMaps(t, pid))
	}
	return bufs
}

func readMaps(t *testing.T, pid int) []procfs.Map {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	defer f.Close()
	maps, err := procfs.ParseMaps(f)
	require.NoError(t, err)
	return maps
}
