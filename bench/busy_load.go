package main

import (
	"context"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

//go:embed workloads/busyloop.js
var busyloopJS []byte

//go:embed workloads/BusyLoop.java
var busyloopJava []byte

//go:embed workloads/busyloop.py
var busyloopPy []byte

// Where the busy suite looks for its runtimes.
const (
	nodeBinary     = "/usr/bin/node"
	openJDK17      = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
	temurin25      = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"
	pyenvVersions  = "/root/.pyenv/versions"
	xzBinary       = "/usr/bin/xz"
	xzInputBytes   = 256 << 10 // hex of /dev/urandom bytes, compressed by each xz run
	xzIdleFactor   = 9         // after a run of d, the xz loop sleeps xzIdleFactor*d
	pacerInFlight  = 8         // execs the pacer lets run at once
	sleeperCommand = "/bin/sleep"
)

// groupProc is a child in its own process group, killed with the group: a
// runtime's helpers or a shell's children die with it. Pdeathsig kills it
// if the bench itself is killed.
type groupProc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// startGroup starts cmd in a new process group.
func startGroup(name string, cmd *exec.Cmd) (*groupProc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &groupProc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL to the process group and waits until the process has
// been reaped.
func (p *groupProc) kill() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
}

func (p *groupProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// sleepers are idle processes, all in one process group.
type sleepers struct {
	cmds []*exec.Cmd
	pgid int
}

// startSleepers starts n `sleep 100000` processes. On error the ones
// started are killed.
func startSleepers(n int) (*sleepers, error) {
	s := &sleepers{}
	for range n {
		cmd := exec.Command(sleeperCommand, "100000")
		// The first one leads the group, the others join it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: s.pgid, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			err = fmt.Errorf("starting sleeper %d of %d: %w", len(s.cmds)+1, n, err)
			s.kill()
			return nil, err
		}
		if s.pgid == 0 {
			s.pgid = cmd.Process.Pid
		}
		s.cmds = append(s.cmds, cmd)
	}
	return s, nil
}

// kill kills every sleeper and reaps them all; safe to call twice.
func (s *sleepers) kill() {
	if s == nil || len(s.cmds) == 0 {
		return
	}
	_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
	for _, cmd := range s.cmds {
		_ = cmd.Process.Kill() // in case one left the group
		_ = cmd.Wait()
	}
	s.cmds = nil
}

// raiseLimits lifts the soft limits on open files and processes to their
// hard limits, and checks that kernel.pid_max leaves room for extra more
// processes.
func raiseLimits(extra int) error {
	for _, res := range []int{unix.RLIMIT_NOFILE, unix.RLIMIT_NPROC} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err == nil && l.Cur < l.Max {
			l.Cur = l.Max
			_ = unix.Setrlimit(res, &l)
		}
	}
	data, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil // nothing to check against
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	if need := len(procs) + extra + 1000; pidMax < need {
		return fmt.Errorf("kernel.pid_max is %d, the busy suite needs about %d (sysctl -w kernel.pid_max=%d)", pidMax, need, 4*need)
	}
	return nil
}

// execPacer runs a command rate times a second, at most a number at once,
// and counts the runs that completed.
type execPacer struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    atomic.Int64 // runs that exited
	skipped atomic.Int64 // runs due with every slot busy
}

// pacerRunTimeout bounds each run of the pacer: one still running then is
// killed (and not counted).
const pacerRunTimeout = 10 * time.Second

// startPacer starts the pacer running argv, at most pacerInFlight at once;
// stop it with stop.
func startPacer(rate int, argv ...string) *execPacer {
	return startPacerOf(rate, pacerInFlight, func() []string { return argv })
}

// startPacerOf starts a pacer running the command line next returns (another
// program each time, if it likes), at most inFlight at once; stop it with
// stop. Runs are due by the clock, so a tick that comes late (a loaded host)
// starts the runs it missed.
func startPacerOf(rate, inFlight int, next func() []string) *execPacer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &execPacer{cancel: cancel}
	slots := make(chan struct{}, inFlight)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		start, issued := time.Now(), int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int64(time.Since(start) * time.Duration(rate) / time.Second)
			for ; issued < due; issued++ {
				select {
				case slots <- struct{}{}:
				default:
					p.skipped.Add(1)
					continue
				}
				argv := next()
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					defer func() { <-slots }()
					runCtx, cancel := context.WithTimeout(ctx, pacerRunTimeout)
					defer cancel()
					cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
					cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
					if cmd.Run() == nil {
						p.done.Add(1)
					}
				}()
			}
		}
	}()
	return p
}

// count returns the runs completed so far (0 for no pacer).
func (p *execPacer) count() int64 {
	if p == nil {
		return 0
	}
	return p.done.Load()
}

// stop stops the pacer and waits for its last runs; safe to call twice.
func (p *execPacer) stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
}

// runtimeSet is phase 4's workloads: interpreters and VMs each running a
// small loop, and an xz loop.
type runtimeSet struct {
	procs  []*groupProc
	xzStop context.CancelFunc
	xzDone chan struct{}
	xzRuns atomic.Int64
	xzErr  atomic.Value // string: the last failed run
}

// startRuntimes starts every runtime found whose name holds one of only
// (comma-separated; "" for all, xz included); notes say which are missing.
// On error what was started is stopped.
func startRuntimes(dir, only string) (rs *runtimeSet, notes []string, err error) {
	rs = &runtimeSet{}
	defer func() {
		if err != nil {
			rs.stop()
		}
	}()
	files := map[string][]byte{"busyloop.js": busyloopJS, "BusyLoop.java": busyloopJava, "busyloop.py": busyloopPy}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, nil, err
		}
	}
	type candidate struct{ name, bin, script string }
	cands := []candidate{{"node", nodeBinary, "busyloop.js"}, {"openjdk 17", openJDK17, "BusyLoop.java"}, {"temurin 25", temurin25, "BusyLoop.java"}}
	for minor := 9; minor <= 13; minor++ {
		name := fmt.Sprintf("python 3.%d", minor)
		paths, _ := filepath.Glob(filepath.Join(pyenvVersions, fmt.Sprintf("3.%d.*", minor), "bin", "python3"))
		if bin := latestPatch(paths); bin != "" {
			name = "python " + filepath.Base(filepath.Dir(filepath.Dir(bin)))
			cands = append(cands, candidate{name, bin, "busyloop.py"})
		} else {
			notes = append(notes, name+": not found under "+pyenvVersions+", skipped")
		}
	}
	for _, c := range cands {
		if !selected(c.name, only) {
			continue
		}
		if _, err := os.Stat(c.bin); err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s not found, skipped", c.name, c.bin))
			continue
		}
		// Its output goes to a log in the scratch directory (-keep).
		out, err := os.Create(filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".log"))
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(c.bin, c.script)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
		p, err := startGroup(c.name, cmd)
		out.Close() // the child has its own copy
		if err != nil {
			return nil, nil, err
		}
		rs.procs = append(rs.procs, p)
	}
	if !selected("xz", only) {
		return rs, notes, nil
	}
	if _, err := os.Stat(xzBinary); err != nil {
		notes = append(notes, "xz: "+xzBinary+" not found, skipped")
		return rs, notes, nil
	}
	input := filepath.Join(dir, "xz-input")
	if err := writeRandomHex(input, xzInputBytes); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs.xzStop, rs.xzDone = cancel, make(chan struct{})
	go rs.xzLoop(ctx, input)
	return rs, notes, nil
}

// selected says whether the runtime name holds one of only's
// comma-separated parts ("" selects every runtime).
func selected(name, only string) bool {
	if only == "" {
		return true
	}
	for _, part := range strings.Split(only, ",") {
		if part != "" && strings.Contains(name, part) {
			return true
		}
	}
	return false
}

// xzLoop runs `xz -9 -T1 -c < input > /dev/null` until ctx ends, sleeping
// xzIdleFactor times as long as each run took.
func (rs *runtimeSet) xzLoop(ctx context.Context, input string) {
	defer close(rs.xzDone)
	for ctx.Err() == nil {
		f, err := os.Open(input)
		if err != nil {
			rs.xzErr.Store(err.Error())
			return
		}
		start := time.Now()
		cmd := exec.Command(xzBinary, "-9", "-T1", "-c")
		cmd.Stdin = f // stdout: /dev/null
		p, err := startGroup("xz", cmd)
		if err == nil {
			select {
			case <-p.exited:
				if p.cmd.ProcessState.Success() {
					rs.xzRuns.Add(1)
				} else {
					rs.xzErr.Store(p.cmd.ProcessState.String())
				}
			case <-ctx.Done():
				p.kill()
			}
		} else {
			rs.xzErr.Store(err.Error())
		}
		f.Close()
		select {
		case <-ctx.Done():
		case <-time.After(max(xzIdleFactor*time.Since(start), 45*time.Millisecond)):
		}
	}
}

// dead names the runtimes that have exited, and the xz loop's last error.
func (rs *runtimeSet) dead() []string {
	var out []string
	for _, p := range rs.procs {
		if !p.alive() {
			out = append(out, fmt.Sprintf("%s exited (%v)", p.name, p.cmd.ProcessState))
		}
	}
	if e, ok := rs.xzErr.Load().(string); ok {
		out = append(out, "xz failed: "+e)
	}
	return out
}

// names lists the runtimes running, xz included.
func (rs *runtimeSet) names() []string {
	var out []string
	for _, p := range rs.procs {
		out = append(out, p.name)
	}
	if rs.xzDone != nil {
		out = append(out, "xz -9 -T1")
	}
	return out
}

// stop kills every runtime and the xz loop and reaps them; safe to call
// twice and on nil.
func (rs *runtimeSet) stop() {
	if rs == nil {
		return
	}
	if rs.xzStop != nil {
		rs.xzStop()
		<-rs.xzDone
		rs.xzStop = nil
	}
	for _, p := range rs.procs {
		p.kill()
	}
}

// latestPatch returns the path whose version directory (…/3.X.Y/bin/python3)
// has the highest patch number Y, or "" for none.
func latestPatch(paths []string) string {
	patch := func(p string) int {
		v := filepath.Base(filepath.Dir(filepath.Dir(p)))
		n, err := strconv.Atoi(v[strings.LastIndexByte(v, '.')+1:])
		if err != nil {
			return -1
		}
		return n
	}
	best := ""
	for _, p := range slices.Sorted(slices.Values(paths)) {
		if patch(p) >= 0 && (best == "" || patch(p) > patch(best)) {
			best = p
		}
	}
	return best
}

// writeRandomHex writes n bytes: the hex digits of n/2 bytes of
// /dev/urandom (compressible about 2:1, like text).
func writeRandomHex(path string, n int) error {
	f, err := os.Open("/dev/urandom")
	if err != nil {
		return err
	}
	defer f.Close()
	raw := make([]byte, n/2)
	if _, err := io.ReadFull(f, raw); err != nil {
		return fmt.Errorf("reading /dev/urandom: %w", err)
	}
	return os.WriteFile(path, []byte(hex.EncodeToString(raw)), 0o644)
}
