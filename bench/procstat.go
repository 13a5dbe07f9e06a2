package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat. Linux fixes it at 100 on every architecture we run on
// (sysconf(_SC_CLK_TCK) returns the same constant), so it is assumed rather
// than queried.
const clockTicksPerSecond = 100

// cpuSample is the CPU time a process has used so far, from two sources:
// utime+stime of /proc/<pid>/stat (whole process, including exited threads,
// in 10 ms ticks) and the sum of run times in /proc/<pid>/task/*/schedstat
// (nanoseconds, but only threads still alive).
type cpuSample struct {
	ticks   uint64 // utime + stime, in clock ticks
	schedNS uint64 // sum of per-thread on-CPU time, 0 if unavailable
}

// readCPU samples the CPU time used so far by process pid.
func readCPU(pid int) (cpuSample, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuSample{}, err
	}
	utime, stime, err := procfs.ParseStatTimes(data)
	if err != nil {
		return cpuSample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	s := cpuSample{ticks: utime + stime}
	s.schedNS, _ = readSchedRuntime(pid) // best effort: needs CONFIG_SCHEDSTATS
	return s, nil
}

// readSchedRuntime sums the on-CPU nanoseconds (first field of schedstat) of
// every live thread of pid.
func readSchedRuntime(pid int) (uint64, error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return 0, fmt.Errorf("no schedstat for pid %d", pid)
	}
	var total uint64
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		ns, err := parseSchedstat(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		total += ns
	}
	return total, nil
}

// parseSchedstat returns the first field of a schedstat file: time spent on
// the CPU, in nanoseconds.
func parseSchedstat(data []byte) (uint64, error) {
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0, fmt.Errorf("empty schedstat")
	}
	return strconv.ParseUint(fields[0], 10, 64)
}

// readVmHWM returns the peak resident set size of pid, in bytes.
func readVmHWM(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(data)
}

// parseVmHWM extracts the "VmHWM:" line of /proc/<pid>/status
// ("VmHWM:\t   41236 kB") and returns it in bytes.
func parseVmHWM(data []byte) (uint64, error) { return parseStatusKB(data, "VmHWM") }

// readVmRSS returns the resident set size of pid, in bytes.
func readVmRSS(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusKB(data, "VmRSS")
}

// parseStatusKB extracts the line of field (a size in kB, such as VmHWM or
// VmRSS) from /proc/<pid>/status and returns it in bytes.
func parseStatusKB(data []byte, field string) (uint64, error) {
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("malformed %s line %q", field, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line (kernel thread or exited process?)", field)
}

// parseWallNS reads the wall time the workload prints on stdout: the last
// non-empty line, an integer count of nanoseconds.
func parseWallNS(stdout string) (time.Duration, error) {
	lines := strings.Fields(stdout)
	if len(lines) == 0 {
		return 0, fmt.Errorf("workload printed nothing on stdout")
	}
	last := lines[len(lines)-1]
	ns, err := strconv.ParseInt(last, 10, 64)
	if err != nil || ns <= 0 {
		return 0, fmt.Errorf("workload's last stdout line %q is not a wall time in ns", last)
	}
	return time.Duration(ns), nil
}

// parseCPUNS finds the "<name>: cpu_ns N" line workload name prints on
// stderr (among perf's own messages) and returns N.
func parseCPUNS(stderr, name string) (time.Duration, error) {
	prefix := name + ": cpu_ns "
	for line := range strings.Lines(stderr) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !ok {
			continue
		}
		ns, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ns <= 0 {
			return 0, fmt.Errorf("bad workload CPU time %q", rest)
		}
		return time.Duration(ns), nil
	}
	return 0, fmt.Errorf("workload printed no %q line on stderr", strings.TrimSpace(prefix))
}

// parseSwitchRate finds the "<name>: switches_per_s X" line workload name
// prints on stderr and returns X, or 0 if there is none or it is malformed
// (the rate is informative only).
func parseSwitchRate(stderr, name string) float64 {
	prefix := name + ": switches_per_s "
	for line := range strings.Lines(stderr) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			if v, err := strconv.ParseFloat(rest, 64); err == nil && v > 0 {
				return v
			}
			return 0
		}
	}
	return 0
}

// parsePID finds the "<name>: pid N" line workload name prints on stderr
// and returns N, or 0 if there is none or it is malformed.
func parsePID(stderr, name string) int {
	prefix := name + ": pid "
	for line := range strings.Lines(stderr) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			if pid, err := strconv.Atoi(rest); err == nil && pid > 0 {
				return pid
			}
			return 0
		}
	}
	return 0
}

// median returns the median of xs (the mean of the two middle values for an
// even count), or 0 for no values. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}
