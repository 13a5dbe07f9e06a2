package main

// Suite startup: how soon a process started under a running collector has
// its stacks named whole. The collector runs host-wide (cpu 99 Hz,
// report_interval 1s, unwinding auto); one at a time, each runtime's
// workload is started after it is ready and runs -startup-window: xz -9 -T1
// compressing node's binary (native code without frame pointers, walked
// with liblzma's unwind table: lzma_code on the stack), node (spin ← work ←
// main), OpenJDK 17 (JavaFixed.burn ← JavaFixed.work, source launcher) and
// CPython -python (fib ← py_work ← main). It runs twice: on an idle host,
// and beside the busy suite's runtimes (node, two JVMs, five CPythons and
// xz bursting, started before the collector), as a node sees a deploy.
//
// From the collector's pprof files (one per 1 s report, each with its
// window) it reports per workload: the end of the first window holding a
// sample of it with the whole chain (the time to a first whole stack, an
// upper bound at the report's 1 s resolution), the end of the first window
// from which every window has ≥ 90% of its samples whole, and the share
// whole over the whole run.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
}

// startupRow is what one workload's run gave.
type startupRow struct {
	name          string
	first, ninety time.Duration // after exec; -1: never
	whole         chainCount
}

func (e env) startupSpecs() ([]startupSpec, error) {
	files := map[string][]byte{"JavaFixed.java": javafixedSource, "pyfixed.py": pyfixedSource, "nodefixed.js": nodefixedSource}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	long := strconv.Itoa(1 << 30) // iterations: killed long before
	return []startupSpec{
		{"xz -9 -T1", []string{xzBinary, "-9", "-T1", "-c", nodeBinary}, []string{"lzma_code"}},
		{"node", []string{e.o.node, filepath.Join(e.dir, "nodefixed.js"), long}, nodeChain},
		{"OpenJDK 17", []string{filepath.Join(e.o.jdk, "bin", "java"), "-Xmx64m", "-XX:CompileCommand=quiet",
			"-XX:CompileCommand=dontinline,JavaFixed::burn", filepath.Join(e.dir, "JavaFixed.java"), long},
			[]string{"JavaFixed.burn", "JavaFixed.work"}},
		{"CPython " + filepath.Base(filepath.Dir(filepath.Dir(e.o.python))), []string{e.o.python, filepath.Join(e.dir, "pyfixed.py"), long},
			[]string{"fib", "py_work", "main"}},
	}, nil
}

func runStartupSuite(ctx context.Context, e env) error {
	specs, err := e.startupSpecs()
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
		fmt.Println("| workload | first whole stack by (s after exec) | ≥ 90% whole from (s) | whole over the run | samples |")
		fmt.Println("| --- | --- | --- | --- | --- |")
		for _, r := range rows {
			share, _ := r.whole.share()
			fmt.Printf("| %s | %s | %s | %.1f%% | %d |\n", r.name, seconds(r.first), seconds(r.ninety), share, r.whole.total)
		}
		for _, n := range notes {
			fmt.Println("note:", n)
		}
	}
	return nil
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
	r := startupRow{name: s.name, first: -1, ninety: -1}
	type window struct {
		end time.Duration
		n   chainCount
	}
	var ws []window
	for _, p := range profs {
		n := countChain(p, pid, s.chain)
		if n.total == 0 {
			continue
		}
		end := time.Unix(0, p.TimeNanos+p.DurationNanos).Sub(started)
		ws = append(ws, window{end, n})
		r.whole = r.whole.add(n)
		if r.first < 0 && n.matched > 0 {
			r.first = end
		}
	}
	for i := range ws {
		ok := true
		for _, w := range ws[i:] {
			if sh, _ := w.n.share(); sh < 90 {
				ok = false
				break
			}
		}
		if ok {
			r.ninety = ws[i].end
			break
		}
	}
	return r
}
