package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartWorkload starts bin with args and kills it at cleanup.
func StartWorkload(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	start(t, cmd)
	return cmd
}

// StartReadyWorkload starts bin with args like StartWorkload and returns
// once it has written its "ready" line to stdout: the point its workload
// says it reached (a JVM compiling a source file on a cold machine takes
// seconds before its main runs).
func StartReadyWorkload(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s %v: first line %q, %v", bin, args, line, err)
	}
	return cmd
}

// start starts cmd in a temporary directory and kills it at cleanup. What
// a workload writes to its working directory (node writes V8 logs there
// with --perf-basic-prof) stays out of the source tree.
func start(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// ProcessCPU sums the on-CPU time of every thread of pid from
// /proc/<pid>/task/*/schedstat: the truth a CPU profile is compared with.
func ProcessCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schedstat for pid %d: %v", pid, err)
	}
	var total time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		first, _, _ := strings.Cut(string(b), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		total += time.Duration(ns)
	}
	return total
}
