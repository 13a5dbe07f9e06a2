package testutil

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SDTPair is a running testdata/workloads/usdt/sdtpair.c: USDT probe
// pairs around sleeps of 10, 20 and 30 ms in its executable (Bin, with
// semaphores) and in the library it loaded (Lib), run a round at a time.
type SDTPair struct {
	Bin, Lib string
	PID      int
	in       io.Writer
	out      string
	round    int
}

// SDTScope is one scope of a round as the workload measured it
// (CLOCK_MONOTONIC around its probes): Kind "work" (the executable's) or
// "lib"; Enabled: its probe's semaphore was set.
type SDTScope struct {
	Kind       string
	Enabled    bool
	Start, End uint64
}

// SDTPairFiles are the file names of sdtpair and its library among
// prebuilt workloads (PrebuiltWorkloadsEnv), by source.
var SDTPairFiles = map[string]string{"sdtpair.c": "sdtpair", "sdtlib.c": "libsdtlib.so"}

// StartSDTPair builds sdtpair and its library (with <sys/sdt.h>, Debian's
// systemtap-sdt-dev), or takes them prebuilt, starts it with SCHED_FIFO
// (where chrt is: the kernel matrix's guests have none) and returns once
// it has loaded the library. The source files have their own directory
// (testdata/workloads/usdt): they need <sys/sdt.h>.
func StartSDTPair(t testing.TB) *SDTPair {
	t.Helper()
	dir := t.TempDir()
	w := &SDTPair{Bin: filepath.Join(dir, "sdtpair"), Lib: filepath.Join(dir, "libsdtlib.so"), out: filepath.Join(dir, "measured")}
	if pre := os.Getenv(PrebuiltWorkloadsEnv); pre != "" {
		w.Bin, w.Lib = filepath.Join(pre, SDTPairFiles["sdtpair.c"]), filepath.Join(pre, SDTPairFiles["sdtlib.c"])
	} else {
		for src, out := range map[string]string{"sdtpair.c": w.Bin, "sdtlib.c": w.Lib} {
			if err := CompileC(Workload(t, filepath.Join("usdt", src)), out); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(w.Bin, w.Lib, w.out)
	if chrt, err := exec.LookPath("chrt"); err == nil {
		cmd = exec.Command(chrt, "-f", "10", w.Bin, w.Lib, w.out)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.in = in
	StartChild(t, cmd)
	w.PID = cmd.Process.Pid
	w.waitFor(t, "ready")
	return w
}

// waitFor waits until the workload's output holds s and returns it.
func (w *SDTPair) waitFor(t testing.TB, s string) string {
	t.Helper()
	deadline := time.Now().Add(Patient(10 * time.Second))
	for {
		b, _ := os.ReadFile(w.out)
		if strings.Contains(string(b), s) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("sdtpair wrote no %q: %q", s, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Round runs one round and returns its six scopes: the executable's, then
// the library's.
func (w *SDTPair) Round(t testing.TB) []SDTScope {
	t.Helper()
	w.round++
	if _, err := w.in.Write([]byte("round\n")); err != nil {
		t.Fatal(err)
	}
	done := fmt.Sprintf("round %d done", w.round)
	text := w.waitFor(t, done)
	after := "ready"
	if w.round > 1 {
		after = fmt.Sprintf("round %d done", w.round-1)
	}
	_, text, _ = strings.Cut(text, after)
	text, _, _ = strings.Cut(text, done)
	var out []SDTScope
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var s SDTScope
		var enabled int
		if _, err := fmt.Sscan(line, &s.Kind, &enabled, &s.Start, &s.End); err != nil {
			t.Fatalf("sdtpair line %q: %v", line, err)
		}
		s.Enabled = enabled != 0
		out = append(out, s)
	}
	if len(out) != 6 {
		t.Fatalf("sdtpair round %d: %d scopes: %q", w.round, len(out), text)
	}
	return out
}

// Semaphore reads the 16-bit USDT semaphore at link-time address addr of
// the workload's executable from its memory.
func (w *SDTPair) Semaphore(t testing.TB, addr uint64) uint16 {
	t.Helper()
	return USDTSemaphore(t, w.PID, w.Bin, addr)
}
