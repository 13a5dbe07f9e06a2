package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// checkResult is the outcome of one check on one kernel.
type checkResult struct {
	ran     bool
	passed  bool
	figure  string // the test's "matrix:" line
	failure string // the first failure's text, by preference (see failureLines)
	rank    int    // index in failureLines of failure's line
}

// kernelResult is one row of the table.
type kernelResult struct {
	kernel string
	uname  string
	checks map[string]checkResult // by test name
	done   bool
	arch   string // GOARCH of the kernel
	log    string
	err    error
	took   time.Duration
	boot   time.Duration            // until the guest's first marker
	times  map[string]time.Duration // each check's, by test name
}

// label names the kernel as it ran: its release, or the package's name.
func (r kernelResult) label() string {
	if r.uname != "" {
		return r.uname
	}
	return r.kernel
}

func (r kernelResult) failed() bool {
	for _, c := range checksOn(r.arch, r.kernel == "host") {
		if res := r.checks[c.test]; !res.ran || !res.passed {
			return true
		}
	}
	return false
}

func (r kernelResult) summary() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	passed, run := 0, checksOn(r.arch, r.kernel == "host")
	for _, c := range run {
		if r.checks[c.test].passed {
			passed++
		}
	}
	return fmt.Sprintf("%d of %d checks passed", passed, len(run))
}

// setTimes reads the boot's and each check's time from the marker lines'.
func (r *kernelResult) setTimes(marks []mark) {
	r.times = map[string]time.Duration{}
	var start time.Duration
	for _, m := range marks {
		switch {
		case strings.HasPrefix(m.line, markKernel):
			r.boot = m.at
		case strings.HasPrefix(m.line, markCheck):
			start = m.at
		case strings.HasPrefix(m.line, markExit):
			if f := strings.Fields(strings.TrimPrefix(m.line, markExit)); len(f) > 0 {
				r.times[f[0]] = m.at - start
			}
		}
	}
}

// timing says how long the boot and each check took.
func (r kernelResult) timing() string {
	var parts []string
	if r.kernel != "host" {
		parts = append(parts, fmt.Sprintf("boot %v", r.boot.Round(100*time.Millisecond)))
	}
	for _, c := range checks {
		if d, ok := r.times[c.test]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", c.name, d.Round(100*time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

var (
	figureLine = regexp.MustCompile(`^\s+\S+\.go:\d+: matrix: (.*)$`)
	// The first failure's text: testify's Messages or Error line, or a
	// t.Fatal line.
	failureLines = []*regexp.Regexp{
		regexp.MustCompile(`^\s+Messages:\s+(\S.*)$`),
		regexp.MustCompile(`^\s+Error:\s+(\S.*)$`),
		regexp.MustCompile(`^\s+\S+_test\.go:\d+: (\S.*)$`),
	}
)

// parseRun reads the markers and test output of one kernel's run (serial
// console or host output) into r.
func parseRun(r *kernelResult, log string) {
	r.checks = map[string]checkResult{}
	current := ""
	var cur checkResult
	// Lines of any length: a verifier's log can be one line of megabytes.
	for line := range strings.Lines(log) {
		line = strings.TrimRight(line, "\r\n")
		// The serial console may prefix a line with terminal escapes.
		if i := strings.Index(line, "@@matrix"); i > 0 {
			line = line[i:]
		}
		switch {
		case strings.HasPrefix(line, markKernel):
			r.uname = strings.TrimPrefix(line, markKernel)
		case strings.HasPrefix(line, markCheck):
			current, cur = strings.TrimPrefix(line, markCheck), checkResult{}
		case strings.HasPrefix(line, markExit) && current != "":
			f := strings.Fields(strings.TrimPrefix(line, markExit))
			code, err := strconv.Atoi(f[len(f)-1])
			cur.ran = true
			cur.passed = cur.passed && err == nil && code == 0
			r.checks[current] = cur
			current = ""
		case line == markDone:
			r.done = true
		case current == "":
		case strings.HasPrefix(line, "--- PASS: "+current+" "):
			cur.passed = true
		case strings.HasPrefix(line, "--- FAIL: "+current+" "):
			cur.passed = false
		default:
			if m := figureLine.FindStringSubmatch(line); m != nil {
				cur.figure = m[1]
				continue
			}
			for rank, re := range failureLines {
				if m := re.FindStringSubmatch(line); m != nil && (cur.failure == "" || rank < cur.rank) {
					cur.failure, cur.rank = m[1], rank
				}
			}
		}
	}
}

// renderTable prints kernel x check as a Markdown table.
func renderTable(results []kernelResult) string {
	var b strings.Builder
	b.WriteString("| kernel |")
	for _, c := range checks {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString("\n| --- |")
	for range checks {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s |", r.label())
		for _, c := range checks {
			cell := r.checks[c.test]
			switch {
			case !c.runsOn(r.arch, r.kernel == "host"):
				b.WriteString(" n/a |")
			case !cell.ran:
				b.WriteString(" ✗ not run |")
			case cell.passed:
				fmt.Fprintf(&b, " ✔ %s |", tableText(cell.figure))
			default:
				fmt.Fprintf(&b, " ✗ %s |", tableText(strings.Join(nonEmpty(cell.failure, cell.figure, "failed"), "; ")))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// nonEmpty returns the non-empty strings of s; the last one only if no
// other is (a default).
func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s[:len(s)-1] {
		if x != "" {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		out = s[len(s)-1:]
	}
	return out
}

func tableText(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return strings.TrimSpace(s)
}

const (
	readmeBegin = "<!-- kernel-matrix:begin (make test-kernels README=1 writes this table) -->"
	readmeEnd   = "<!-- kernel-matrix:end -->"
)

// updateReadme replaces the table between the matrix markers of path.
func updateReadme(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q section", path, readmeBegin, readmeEnd)
	}
	s = s[:i+len(readmeBegin)] + "\n" + table + readmeEnd + s[j+len(readmeEnd):]
	return os.WriteFile(path, []byte(s), 0o644)
}
