package main

// Suite startup: how soon a process started under a running collector has
// its stacks named whole. The collector runs host-wide (cpu 99 Hz,
// report_interval 1s, unwinding auto); one at a time, each runtime's
// workload is started after it is ready and runs -startup-window: xz -9 -T1
// compressing node's binary (native code without frame pointers, walked
// with liblzma's unwind table: lzma_code on the stack), node (spin ← work ←
// main), OpenJDK 17 (JavaFixed.burn ← JavaFixed.work, compiled before) and
// CPython -python (fib ← py_work ← main). It runs twice: on an idle host,
// and beside the busy suite's runtimes (node, two JVMs, five CPythons and
// xz bursting, started before the collector), as a node sees a deploy.
//
// From the collector's pprof files (one per 1 s report, each with its
// window) it reports per workload: the end of the first window holding a
// sample of it with the whole chain (the time to a first whole stack, an
// upper bound at the report's 1 s resolution), and the share of its
// working thread's samples whole in the windows ending within 3 s of its
// exec and in those after. (xz's samples in read and write have no
// lzma_code: about 2% are never whole.)

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
)

// startupSpec is one workload of the startup suite.
type startupSpec struct {
	name  string
	argv  []string
	chain []string // leaf first
	// thread says whether a sample of process pid is of its working
	// thread.
	thread func(s *profile.Sample, pid int) bool
}

// startupEarly is the start of a process whose windows are its early
// ones.
const startupEarly = 3 * time.Second

// startupRow is what one workload's run gave: the end of the first window
// with a whole stack (-1: none), and the working thread's samples whole in
// the windows ending within startupEarly of its exec and after.
type startupRow struct {
	name         string
	first        time.Duration
	early, later chainCount
}

func mainThread(s *profile.Sample, pid int) bool {
	return slices.Contains(s.NumLabel["tid"], int64(pid))
}

// javaMainThread is the thread the java launcher runs main on: named as
// the launcher, not the process's first.
func javaMainThread(s *profile.Sample, pid int) bool {
	return !mainThread(s, pid) && slices.Contains(s.Label["thread.name"], "java")
}

func (e env) startupSpecs(ctx context.Context) ([]startupSpec, error) {
	files := map[string][]byte{"JavaFixed.java": javafixedSource, "pyfixed.py": pyfixedSource, "nodefixed.js": nodefixedSource}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	// Compiled before: the source launcher would compile it in the JVM
	// first, on the thread measured.
	javac := exec.CommandContext(ctx, filepath.Join(e.o.jdk, "bin", "javac"), "-d", e.dir, filepath.Join(e.dir, "JavaFixed.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac JavaFixed.java: %w\n%s", err, out)
	}
	long := strconv.Itoa(1 << 30) // iterations: killed long before
	return []startupSpec{
		{"xz -9 -T1", []string{xzBinary, "-9", "-T1", "-c", nodeBinary}, []string{"lzma_code"}, mainThread},
		{"node", []string{e.o.node, filepath.Join(e.dir, "nodefixed.js"), long}, nodeChain, mainThread},
		{"OpenJDK 17", []string{filepath.Join(e.o.jdk, "bin", "java"), "-Xmx64m", "-XX:CompileCommand=quiet",
			"-XX:CompileCommand=dontinline,JavaFixed::burn", "-cp", e.dir, "JavaFixed", long},
			[]string{"JavaFixed.burn", "JavaFixed.work"}, javaMainThread},
		{"CPython " + filepath.Base(filepath.Dir(filepath.Dir(e.o.python))), []string{e.o.python, filepath.Join(e.dir, "pyfixed.py"), long},
			[]string{"fib", "py_work", "main"}, mainThread},
	}, nil
}

func runStartupSuite(ctx context.Context, e env) error {
	specs, err := e.startupSpecs(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("== suite startup: a process started under a running collector (cpu 99 Hz, report_interval 1s), %v each ==\n", e.o.startupWindow)
	for _, busy := range []bool{false, true} {
		rows, notes, err := e.startupRound(ctx, specs, busy)
		if err != nil {
			return err
		}
		host := "idle host"
		if busy {
			host = "beside the busy suite's runtimes"
		}
		fmt.Printf("\n%s:\n\n", host)
		fmt.Printf("| workload | first whole stack by (s after exec) | whole in its first %v (samples) | whole after (samples) |\n", startupEarly)
		fmt.Println("| --- | --- | --- | --- |")
		for _, r := range rows {
			fmt.Printf("| %s | %s | %s | %s |\n", r.name, seconds(r.first), percentOf(r.early), percentOf(r.later))
		}
		for _, n := range notes {
			fmt.Println("note:", n)
		}
	}
	return nil
}

func percentOf(c chainCount) string {
	share, ok := c.share()
	if !ok {
		return "no sample"
	}
	return fmt.Sprintf("%.1f%% (%d)", share, c.total)
}

func seconds(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

// startupRound runs every spec under one collector, on an idle host or
// beside the busy runtimes.
func (e env) startupRound(ctx context.Context, specs []startupSpec, busy bool) (rows []startupRow, notes []string, err error) {
	if busy {
		rs, ns, err := startRuntimes(e.dir, e.o.busyRuntimes)
		if err != nil {
			return nil, nil, err
		}
		defer rs.stop()
		notes = ns
	}
	c, err := startCollector(ctx, e.collector(profileConfig{cpuHz: 99, reportInterval: time.Second}))
	if err != nil {
		return nil, nil, err
	}
	type run struct {
		pid     int
		started time.Time
	}
	var runs []run
	for _, s := range specs {
		if _, err := os.Stat(s.argv[0]); err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v, skipped", s.name, err))
			runs = append(runs, run{})
			continue
		}
		cmd := exec.Command(s.argv[0], s.argv[1:]...)
		cmd.Dir = e.dir
		started := time.Now()
		p, err := startGroup(s.name, cmd)
		if err != nil {
			return nil, nil, errors.Join(err, c.stop())
		}
		runs = append(runs, run{cmd.Process.Pid, started})
		select {
		case <-ctx.Done():
		case <-time.After(e.o.startupWindow):
		}
		if !p.alive() {
			notes = append(notes, fmt.Sprintf("%s exited before its window ended", s.name))
		}
		p.kill()
		if ctx.Err() != nil {
			return nil, nil, errors.Join(ctx.Err(), c.stop())
		}
	}
	time.Sleep(2 * time.Second) // the last window's report
	if err := c.stop(); err != nil {
		return nil, nil, err
	}
	profs, err := readWindows(c.profiles)
	if err != nil {
		return nil, nil, err
	}
	for i, s := range specs {
		if runs[i].pid == 0 {
			continue
		}
		rows = append(rows, startupFigures(s, runs[i].pid, runs[i].started, profs))
	}
	return rows, notes, nil
}

// readWindows parses every pprof file in dir, in the order of their
// windows.
func readWindows(dir string) ([]*profile.Profile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
	if err != nil {
		return nil, err
	}
	var out []*profile.Profile
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		prof, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, prof)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TimeNanos < out[j].TimeNanos })
	return out, nil
}

// startupFigures are one workload's figures from the windows.
func startupFigures(s startupSpec, pid int, started time.Time, profs []*profile.Profile) startupRow {
	r := startupRow{name: s.name, first: -1}
	for _, p := range profs {
		n := countChainWhere(p, pid, s.chain, func(smp *profile.Sample) bool { return s.thread(smp, pid) })
		if n.total == 0 {
			continue
		}
		end := time.Unix(0, p.TimeNanos+p.DurationNanos).Sub(started)
		if r.first < 0 && n.matched > 0 {
			r.first = end
		}
		if end <= startupEarly {
			r.early = r.early.add(n)
		} else {
			r.later = r.later.add(n)
		}
	}
	return r
}
