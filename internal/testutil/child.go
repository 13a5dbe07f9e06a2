package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// tailLines is how many of a child's last lines of output a failure shows.
const tailLines = 20

// Child is a process a test started: in a process group of its own that is
// killed at the test's cleanup, and that the kernel kills when the test
// process dies (see childAttr). Its stdout is read line by line as it comes
// (the child never blocks on a full pipe), and every wait for it has a
// deadline; a failure shows its last lines of stdout and stderr.
type Child struct {
	Cmd  *exec.Cmd
	name string

	mu      sync.Mutex
	pending []string      // stdout lines not yet taken
	more    chan struct{} // signalled when a line is added or stdout ends
	eof     bool          // stdout ended
	tail    []string      // the last tailLines lines of stdout and stderr
	readers sync.WaitGroup

	exited  chan struct{} // closed once the process was reaped
	waitErr error
}

// StartChild starts cmd as a Child. cmd.Stderr must be unset (the Child
// reads it), and so should cmd.Stdout unless it is a file the child's
// output goes to instead (a compressor's stream to /dev/null: then the
// Child has no lines); cmd.Stdin may be a pipe the caller made.
func StartChild(t testing.TB, cmd *exec.Cmd) *Child {
	t.Helper()
	c, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Kill(Patient(30 * time.Second)); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s", c.lastOutput())
		}
	})
	return c
}

func startChild(cmd *exec.Cmd) (*Child, error) {
	_, stdoutFile := cmd.Stdout.(*os.File)
	if cmd.Stderr != nil || cmd.Stdout != nil && !stdoutFile {
		return nil, fmt.Errorf("%v: a Child reads stderr, and stdout unless it is a file", cmd.Args)
	}
	c := &Child{Cmd: cmd, name: strings.Join(cmd.Args, " "), more: make(chan struct{}, 1), exited: make(chan struct{})}
	OwnGroup(cmd)
	// Files, not writers: exec copies nothing, so Wait returns when the
	// process exits and what it wrote stays readable here.
	var outR, outW *os.File
	if !stdoutFile {
		var err error
		if outR, outW, err = os.Pipe(); err != nil {
			return nil, err
		}
		cmd.Stdout = outW
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		if outR != nil {
			outR.Close()
			outW.Close()
		}
		return nil, err
	}
	cmd.Stderr = errW
	err = cmd.Start()
	errW.Close()
	if outW != nil {
		outW.Close()
	}
	if err != nil {
		errR.Close()
		if outR != nil {
			outR.Close()
		}
		return nil, fmt.Errorf("start %s: %w", c.name, err)
	}
	if outR != nil {
		c.readers.Add(1)
		go c.read(outR, true)
	} else {
		c.eof = true
	}
	c.readers.Add(1)
	go c.read(errR, false)
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// read takes the lines of one of the child's outputs until it ends.
func (c *Child) read(r io.ReadCloser, stdout bool) {
	defer c.readers.Done()
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		shown := line
		if !stdout {
			shown = "stderr: " + line
		}
		c.tail = append(c.tail, shown)
		if len(c.tail) > tailLines {
			c.tail = c.tail[len(c.tail)-tailLines:]
		}
		if stdout {
			c.pending = append(c.pending, line)
		}
		c.mu.Unlock()
		if stdout {
			c.signal()
		}
	}
	if stdout {
		c.mu.Lock()
		c.eof = true
		if err := sc.Err(); err != nil {
			c.tail = append(c.tail, "reading stdout: "+err.Error())
		}
		c.mu.Unlock()
		c.signal()
	}
}

func (c *Child) signal() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Line returns the child's next line of stdout. When none comes within
// timeout, or stdout ends first, the test fails with the child's last
// output (and the child is killed at cleanup).
func (c *Child) Line(t testing.TB, timeout time.Duration) string {
	t.Helper()
	lines := c.Until(t, timeout, func(string) bool { return true })
	return lines[len(lines)-1]
}

// Until returns the child's lines of stdout up to and including the first
// that match accepts, failing the test as Line does when none comes within
// timeout.
func (c *Child) Until(t testing.TB, timeout time.Duration, match func(line string) bool) []string {
	t.Helper()
	lines, err := c.until(timeout, match)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.lastOutput())
	}
	return lines
}

func (c *Child) until(timeout time.Duration, match func(string) bool) ([]string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var lines []string
	for {
		c.mu.Lock()
		for len(c.pending) > 0 {
			line := c.pending[0]
			c.pending = c.pending[1:]
			lines = append(lines, line)
			if match(line) {
				c.mu.Unlock()
				return lines, nil
			}
		}
		eof := c.eof
		c.mu.Unlock()
		if eof {
			return lines, fmt.Errorf("%s closed its output without the line the test waits for", c.name)
		}
		select {
		case <-c.more:
		case <-deadline.C:
			return lines, fmt.Errorf("%s: no line the test waits for within %v", c.name, timeout)
		}
	}
}

// Pending returns the child's lines of stdout not yet taken, at once.
func (c *Child) Pending() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.pending
	c.pending = nil
	return lines
}

// Wait waits for the child to exit by itself and returns what exec's Wait
// returned. When it has not exited within timeout it is killed and the test
// fails with its last output.
func (c *Child) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-c.exited:
		c.readers.Wait()
		return c.waitErr
	case <-time.After(timeout):
	}
	err := c.Kill(Patient(30 * time.Second))
	t.Fatalf("%s did not exit within %v (killed: %v)\n%s", c.name, timeout, err, c.lastOutput())
	return nil
}

// Exited is closed once the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Kill kills the child's process group (the child and what it started) and
// waits up to timeout for the child to be reaped. Killing a child that has
// exited is not an error.
func (c *Child) Kill(timeout time.Duration) error {
	KillGroup(c.Cmd.Process)
	select {
	case <-c.exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) not reaped %v after SIGKILL", c.name, c.Pid(), timeout)
	}
}

// lastOutput is the child's last lines of stdout and stderr, for failures.
func (c *Child) lastOutput() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, "last output of %s:\n", c.name)
	for _, l := range c.tail {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}

// RunWithin runs cmd to its end and returns its combined output; past
// timeout its process group is killed and an error says so. The one way
// tests run a command to completion (compilers, go build, apt-get).
func RunWithin(cmd *exec.Cmd, timeout time.Duration) ([]byte, error) {
	var out bytes.Buffer
	err := runWithin(cmd, &out, &out, timeout)
	return out.Bytes(), err
}

// OutputWithin is RunWithin for a command whose stdout a test parses: it
// returns stdout alone, and stderr in the error when the command fails.
func OutputWithin(cmd *exec.Cmd, timeout time.Duration) ([]byte, error) {
	var out, stderr bytes.Buffer
	if err := runWithin(cmd, &out, &stderr, timeout); err != nil {
		return out.Bytes(), fmt.Errorf("%w\n%s", err, stderr.Bytes())
	}
	return out.Bytes(), nil
}

func runWithin(cmd *exec.Cmd, stdout, stderr io.Writer, timeout time.Duration) error {
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second // a descendant holding the output open ends no wait
	OwnGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		KillGroup(cmd.Process)
		return fmt.Errorf("%v: killed after %v (%w)", cmd.Args, timeout, <-done)
	}
}
