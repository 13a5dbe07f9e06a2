package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentChild starts a shell that starts a sleep of its own, prints
// "started <the sleep's pid>" and never the line a test waits for.
func silentChild(t *testing.T) *Child {
	c, err := startChild(exec.Command("sh", "-c", "sleep 1000 & echo started $!; echo to stderr >&2; wait"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Kill(10 * time.Second) })
	return c
}

func alive(pid int) bool {
	// A zombie still answers signal 0: read its state.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// A child that never prints the awaited line fails the wait at its
// deadline with its last output, and killing it leaves neither it nor what
// it started.
func TestChildDeadlineKillsEverything(t *testing.T) {
	c := silentChild(t)
	start := time.Now()
	lines, err := c.until(700*time.Millisecond, func(l string) bool { return l == "ready" })
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "within 700ms")
	assert.Less(t, elapsed, 3*time.Second, "the wait ends at its deadline")
	assert.GreaterOrEqual(t, elapsed, 700*time.Millisecond)
	require.Len(t, lines, 1)
	sleepPID, err := strconv.Atoi(strings.TrimPrefix(lines[0], "started "))
	require.NoError(t, err, lines[0])
	assert.Eventually(t, func() bool { return strings.Contains(c.lastOutput(), "stderr: to stderr") }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, c.lastOutput(), "started ")

	require.True(t, alive(c.Pid()) && alive(sleepPID))
	require.NoError(t, c.Kill(10*time.Second))
	assert.Eventually(t, func() bool { return !alive(sleepPID) }, 5*time.Second, 10*time.Millisecond,
		"the child's own child %d outlived the kill", sleepPID)
	assert.False(t, alive(c.Pid()))
}

// A child that ends its output without the line fails the wait at once.
func TestChildEndsWithoutTheLine(t *testing.T) {
	c, err := startChild(exec.Command("sh", "-c", "echo one; echo two"))
	require.NoError(t, err)
	start := time.Now()
	lines, err := c.until(time.Minute, func(l string) bool { return l == "ready" })
	require.ErrorContains(t, err, "closed its output")
	assert.Equal(t, []string{"one", "two"}, lines)
	assert.Less(t, time.Since(start), 10*time.Second)
}

// Lines come in order, the awaited one last; the child's exit is waited for.
func TestChildUntilAndWait(t *testing.T) {
	c := StartChild(t, exec.Command("sh", "-c", "echo a; echo ready; echo b; exit 3"))
	assert.Equal(t, []string{"a", "ready"}, c.Until(t, time.Minute, func(l string) bool { return l == "ready" }))
	assert.Equal(t, "b", c.Line(t, time.Minute))
	var exit *exec.ExitError
	require.ErrorAs(t, c.Wait(t, time.Minute), &exit)
	assert.Equal(t, 3, exit.ExitCode())
}

// The kernel kills a child when the test process that started it dies
// without its cleanup (go test's -timeout, a kill): the helper process below
// starts one and is killed.
func TestChildDiesWithTheTestProcess(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	helper := exec.Command(self, "-test.run=^TestChildHelperProcess$", "-test.timeout=2m")
	helper.Env = append(os.Environ(), "TESTUTIL_CHILD_HELPER=1")
	h := StartChild(t, helper)
	pid, err := strconv.Atoi(strings.TrimPrefix(h.Until(t, time.Minute, func(l string) bool {
		return strings.HasPrefix(l, "child ")
	})[0], "child "))
	require.NoError(t, err)
	require.True(t, alive(pid))
	// SIGKILL the helper alone (not its group): only the kernel can end its child.
	require.NoError(t, syscall.Kill(h.Pid(), syscall.SIGKILL))
	assert.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond,
		"child %d outlived the test process that started it", pid)
}

func TestChildHelperProcess(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD_HELPER") != "1" {
		return // only as the helper of TestChildDiesWithTheTestProcess
	}
	c := StartChild(t, exec.Command("sleep", "1000"))
	fmt.Printf("child %d\n", c.Pid())
	time.Sleep(time.Minute)
}

// RunWithin ends a command that outlives its deadline, and what it started.
func TestRunWithinDeadline(t *testing.T) {
	start := time.Now()
	out, err := RunWithin(exec.Command("sh", "-c", "echo begun; sleep 1000"), 500*time.Millisecond)
	require.ErrorContains(t, err, "killed after 500ms")
	assert.Equal(t, "begun\n", string(out))
	assert.Less(t, time.Since(start), 8*time.Second)

	out, err = RunWithin(exec.Command("sh", "-c", "echo fine"), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "fine\n", string(out))
}
