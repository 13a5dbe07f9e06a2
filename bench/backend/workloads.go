package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

type workloads struct{ cpuburn, sleepers string }

// truth is what the workloads measured themselves.
type truth struct {
	burnCPU               time.Duration // cpuburn's user+system time
	sleepLong, sleepShort time.Duration // off-CPU time in sleep_long and sleep_short
}

func buildWorkloads(dir string) (workloads, error) {
	var w workloads
	for name, out := range map[string]*string{"cpuburn": &w.cpuburn, "sleepers": &w.sleepers} {
		*out = filepath.Join(dir, name)
		src := filepath.Join("testdata", "workloads", name+".c")
		if err := testutil.CompileC(src, *out); err != nil {
			return w, fmt.Errorf("build %s (run from the repository root): %w", name, err)
		}
	}
	return w, nil
}

// runWorkloads runs cpuburn for burnSeconds in pod (moved into its cgroup
// at once) and sleepers (ratio mode, sleeps per thread) beside it on the
// host, and returns what they measured.
func runWorkloads(ctx context.Context, w workloads, dir string, burnSeconds, sleeps int, pod testutil.FakePod) (truth, error) {
	var t truth
	burn := exec.CommandContext(ctx, w.cpuburn, strconv.Itoa(burnSeconds))
	burn.Dir = dir
	if err := burn.Start(); err != nil {
		return t, err
	}
	leave, err := pod.Enter(burn.Process.Pid)
	defer func() {
		if err := leave(); err != nil {
			fmt.Println("backend:", err)
		}
	}()
	if err != nil {
		_ = burn.Process.Kill()
		_ = burn.Wait()
		return t, err
	}
	sleep := exec.CommandContext(ctx, w.sleepers, "ratio", strconv.Itoa(sleeps))
	sleep.Dir = dir
	stdin, err := sleep.StdinPipe()
	if err != nil {
		return t, err
	}
	stdout, err := sleep.StdoutPipe()
	if err != nil {
		return t, err
	}
	if err := sleep.Start(); err != nil {
		_ = burn.Process.Kill()
		_ = burn.Wait()
		return t, err
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Scan() // its pid
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return t, err
	}
	for lines.Scan() && lines.Text() != "done" {
		f := strings.Fields(lines.Text())
		if len(f) < 2 {
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "sleep_long":
			t.sleepLong = time.Duration(ns)
		case "sleep_short":
			t.sleepShort = time.Duration(ns)
		}
	}
	_ = stdin.Close()
	if err := burn.Wait(); err != nil {
		return t, fmt.Errorf("cpuburn: %w", err)
	}
	ru := burn.ProcessState.SysUsage().(*syscall.Rusage)
	t.burnCPU = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	if t.sleepLong == 0 || t.sleepShort == 0 {
		return t, fmt.Errorf("sleepers printed no totals")
	}
	return t, nil
}
