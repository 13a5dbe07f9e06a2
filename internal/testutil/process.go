package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ReadyTimeout is how long a workload has to print its first line: a JVM
// compiling its source on a cold machine takes seconds, an emulated guest
// (PatienceEnv) longer.
var ReadyTimeout = 2 * time.Minute

// StartWorkload starts bin with args in a temporary directory as a Child
// (killed at cleanup with what it started) and returns its command.
func StartWorkload(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	return StartWorkloadChild(t, bin, args...).Cmd
}

// StartWorkloadChild is StartWorkload returning the Child, whose lines of
// stdout the test reads.
func StartWorkloadChild(t testing.TB, bin string, args ...string) *Child {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// What a workload writes to its working directory (node writes V8 logs
	// there with --perf-basic-prof) stays out of the source tree.
	cmd.Dir = t.TempDir()
	return StartChild(t, cmd)
}

// StartReadyWorkload starts bin with args like StartWorkload and returns
// once it has written its "ready" line to stdout: the point its workload
// says it reached (a JVM compiling a source file on a cold machine takes
// seconds before its main runs). A workload that prints anything else
// first, or nothing within ReadyTimeout, fails the test.
func StartReadyWorkload(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	c := StartWorkloadChild(t, bin, args...)
	if line := c.Line(t, Patient(ReadyTimeout)); strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s %v: first line %q, want ready", bin, args, line)
	}
	return c.Cmd
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
