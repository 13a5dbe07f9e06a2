package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runGuest boots the newest Debian kernel of k under qemu with the payload
// (of k's architecture) as initramfs and parses the checks' output from the
// serial console.
//
// The guest has one virtual CPU, emulated by multi-threaded TCG. With two,
// the emulation misses the kernel's cross-CPU synchronisation of live code
// patching: a guest oopses now and then (int3 at __schedule+0x339) when any
// program attaches to or detaches from sched_switch, an empty one too
// (-checks detach -cpus 2: 3 boots in 4). Single-threaded TCG (-tcg-thread
// single) avoids that with two CPUs but runs each in 100 ms turns, charging
// the frozen CPU's time to the thread it was running: a workload that
// splits its own CPU time 3:1 is then sampled 0.68-0.70 in its hot half.
// SMP is covered by the host's run and make test.
func runGuest(ctx context.Context, k kernelSpec, p *payload, dir string, opts options) kernelResult {
	res := kernelResult{kernel: k.String(), arch: k.arch.name}
	pkg, vmlinuz, err := fetchKernel(ctx, opts.cache, k)
	if err != nil {
		res.err = err
		return res
	}
	res.kernel = strings.TrimPrefix(pkg, "linux-image-")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.err = err
		return res
	}
	timeout := opts.timeouts[k.arch.name]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var console timedLog
	args := slices.Concat(k.arch.qemu[1:], []string{
		// Software emulation: the host's KVM cannot boot these kernels.
		"-accel", "tcg,thread=" + opts.tcgThread, "-smp", strconv.Itoa(opts.cpus), "-m", "2048",
		"-kernel", vmlinuz, "-initrd", p.initramfs,
		"-append", "console=" + k.arch.console + " panic=-1 loglevel=3",
		"-nographic", "-nodefaults", "-no-reboot", "-serial", "stdio", "-monitor", "none",
	})
	cmd := exec.CommandContext(ctx, k.arch.qemu[0], args...)
	console.start = time.Now()
	cmd.Stdout, cmd.Stderr = &console, &console
	err = cmd.Run()
	_ = os.WriteFile(filepath.Join(dir, "console.log"), console.buf.Bytes(), 0o644)
	res.log = console.buf.String()
	parseRun(&res, res.log)
	res.setTimes(console.marks)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.err = fmt.Errorf("no result within %v", timeout)
	case err != nil:
		res.err = fmt.Errorf("qemu: %w", err)
	case !res.done:
		res.err = errors.New("the guest stopped before running every check")
	}
	return res
}

// runHost runs the checks on the machine's own kernel, with the same
// binaries and workloads.
func runHost(ctx context.Context, p *payload, timeout time.Duration) kernelResult {
	res := kernelResult{kernel: "host", arch: p.arch.name}
	release := "host"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		release = strings.TrimSpace(string(b)) + " (host)"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := timedLog{start: time.Now()}
	fmt.Fprintf(&out, "%s%s\n", markKernel, release)
	for _, c := range checksOn(p.arch.name, true) {
		fmt.Fprintf(&out, "%s%s\n", markCheck, c.test)
		cmd := exec.CommandContext(ctx, filepath.Join(p.root, "bin", c.binary),
			"-test.v", "-test.count=1", fmt.Sprintf("-test.timeout=%dm", c.minutes()), "-test.run", "^"+c.test+"$")
		cmd.Env = append(os.Environ(), testEnv(p.root)...)
		cmd.Dir = os.TempDir()
		cmd.Stdout, cmd.Stderr = &out, &out
		code := 0
		if err := cmd.Run(); err != nil {
			code = 1
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			}
		}
		fmt.Fprintf(&out, "%s%s %d\n", markExit, c.test, code)
	}
	fmt.Fprintf(&out, "%s\n", markDone)
	res.log = out.buf.String()
	parseRun(&res, res.log)
	res.setTimes(out.marks)
	if ctx.Err() != nil {
		res.err = fmt.Errorf("no result within %v", timeout)
	}
	return res
}

// timedLog is a run's output with the time each marker line came (since
// start): the guest's boot and each check's time, as the host sees them.
type timedLog struct {
	start   time.Time
	buf     bytes.Buffer
	pending []byte // the start of the last line, until complete
	marks   []mark
}

// maxMarkLine bounds what timedLog keeps of a line: markers are short, a
// verifier's log can be a line of megabytes.
const maxMarkLine = 4096

type mark struct {
	line string
	at   time.Duration
}

func (l *timedLog) Write(b []byte) (int, error) {
	at := time.Since(l.start)
	l.buf.Write(b)
	for rest := b; ; {
		i := bytes.IndexByte(rest, '\n')
		part := rest
		if i >= 0 {
			part = rest[:i]
		}
		l.pending = append(l.pending, part[:min(len(part), maxMarkLine-len(l.pending))]...)
		if i < 0 {
			return len(b), nil
		}
		line := strings.TrimRight(string(l.pending), "\r")
		if j := strings.Index(line, "@@matrix"); j >= 0 {
			l.marks = append(l.marks, mark{line[j:], at})
		}
		l.pending, rest = l.pending[:0], rest[i+1:]
	}
}
