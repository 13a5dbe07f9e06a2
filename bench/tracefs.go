package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tracefsPath is where perf looks for tracepoints (sched:sched_switch).
const tracefsPath = "/sys/kernel/tracing"

// perfSwitchArgs are the perf record arguments of the sched_switch scenario.
var perfSwitchArgs = []string{"-e", "sched:sched_switch", "-a", "-g"}

// perfProbe is what probePerfSwitch found out.
type perfProbe struct {
	unavailable string // why perf cannot trace sched_switch ("" if it can)
	note        string // how tracefs got mounted, if it did
}

// probePerfSwitch checks whether `perf record -e sched:sched_switch` works by
// recording a trivial command. If it fails and tracefs is not mounted, it
// mounts tracefs once and tries again. perf may also mount tracefs itself.
// cleanup unmounts tracefs if it was not mounted before the probe and is
// now; call it once the perf runs are over.
func probePerfSwitch(ctx context.Context, perf, dir string) (p perfProbe, cleanup func()) {
	cleanup = func() {}
	wasMounted, err := tracefsMounted()
	if err != nil {
		return perfProbe{unavailable: err.Error()}, cleanup
	}
	defer func() {
		if wasMounted {
			return
		}
		now, err := tracefsMounted()
		if err != nil || !now {
			return
		}
		cleanup = func() {
			out, err := exec.Command("umount", tracefsPath).CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: warning: unmounting tracefs from %s: %v: %s\n", tracefsPath, err, bytes.TrimSpace(out))
			}
		}
		if p.note == "" {
			p.note = "tracefs was not mounted; perf mounted it on " + tracefsPath + " (unmounted after the suite)"
		}
	}()

	reason := tryPerfSwitch(ctx, perf, dir)
	if reason == "" {
		return perfProbe{}, cleanup
	}
	if wasMounted {
		return perfProbe{unavailable: reason}, cleanup
	}
	if now, err := tracefsMounted(); err != nil || now {
		return perfProbe{unavailable: reason}, cleanup
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "tracefs", "nodev", tracefsPath).CombinedOutput()
	if err != nil {
		return perfProbe{unavailable: fmt.Sprintf("%s; mounting tracefs on %s failed: %v %s",
			reason, tracefsPath, err, bytes.TrimSpace(out))}, cleanup
	}
	p.note = "tracefs was not mounted; the bench mounted it on " + tracefsPath + " (unmounted after the suite)"
	if again := tryPerfSwitch(ctx, perf, dir); again != "" {
		p.unavailable = again + " (even with tracefs mounted)"
	}
	return p, cleanup
}

// tryPerfSwitch records `true` with perf's sched_switch tracepoint and
// returns why it failed, or "".
func tryPerfSwitch(ctx context.Context, perf, dir string) string {
	data := filepath.Join(dir, "perf-probe.data")
	defer os.Remove(data)
	defer os.Remove(data + ".old")
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	args := append(append([]string{"record"}, perfSwitchArgs...), "-o", data, "--", "true")
	out, err := exec.CommandContext(ctx, perf, args...).CombinedOutput()
	if err == nil {
		return ""
	}
	return perfFailureReason(string(out), err)
}

// perfFailureReason condenses perf's output on failure into one line: its
// first two lines of substance (not perf's status lines, nor blank ones nor
// the event-syntax caret diagram), else the exit error.
func perfFailureReason(output string, err error) string {
	var keep []string
	for line := range strings.Lines(output) {
		line = strings.TrimSpace(line)
		switch {
		case line == "", strings.HasPrefix(line, "[ perf record:"), strings.Trim(line, "^\\ ") == "":
			continue
		}
		keep = append(keep, line)
		if len(keep) == 2 {
			break
		}
	}
	if len(keep) == 0 {
		return fmt.Sprintf("perf record failed: %v", err)
	}
	s := strings.Join(keep, "; ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// tracefsMounted reports whether tracefs is mounted on tracefsPath.
func tracefsMounted() (bool, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false, fmt.Errorf("reading the mount table: %w", err)
	}
	return mountedAt(data, "tracefs", tracefsPath), nil
}

// mountedAt reports whether the mount table data (/proc/self/mounts
// format: device, mount point, type, ...) has a filesystem of type fstype
// on dir.
func mountedAt(data []byte, fstype, dir string) bool {
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == dir && f[2] == fstype {
			return true
		}
	}
	return false
}
