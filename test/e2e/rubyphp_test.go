//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// interpreted is a process of an interpreter walked apart whose frames of
// one script the test checks: the chain it must show, leaf first.
type interpreted struct {
	name   string
	pid    int
	typ    string // profile.frame.type of its frames
	script string // its frames' file (base name)
	chain  []pdata.NamedFrame
	// via are functions of the runtime's own, outside the script, that
	// must come (in order) between the chain's leaf and its root: a C
	// method named by the VM's symbol table (Integer#times, a C method in
	// 3.1, Ruby's <internal:numeric> in 3.3).
	via []string
	// sampleType is the profile checked: "samples" (CPU) or "off_cpu".
	sampleType string
	// tid, if not 0, is the one thread of pid whose samples are checked,
	// and root the function its stacks end at (the thread's root; "":
	// _start, the main thread's), or for an unnamed one the base name of
	// its file.
	tid  int
	root string
}

// phpModes are the ways the PHP checks run each PHP: without opcache, and
// with opcache's tracing JIT.
var phpModes = []struct {
	name    string
	opcache bool
	jit     string
}{{"interpreter", false, ""}, {"jit-tracing", true, "tracing"}}

// phpWorkChain is phpwork.php's chain, leaf first, with the callers'
// lines.
func phpWorkChain(t *testing.T) []pdata.NamedFrame {
	ph := testutil.WorkloadLines(t, "phpwork.php")
	return []pdata.NamedFrame{
		{Function: "Spinner::spin"},
		{Function: "work", Line: int64(ph["work_call"])},
		{Function: "{main}", Line: int64(ph["main_call"])},
	}
}

// share is the share of p's samples whose frames of its type are whole:
// those of p.script are p.chain in order (the leaf's line any), a native
// frame is below the outermost and the stack ends at the thread's root
// (p.root, the main thread's _start: the native walk went on through JIT
// code), those before the chain's leaf are C functions (no file:
// Integer#* called by spin under YJIT), and p.via is among those after
// the leaf; their number and an example of one that is not.
func (p interpreted) share(received []pprofile.Profiles) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range p.stacks(pd) {
			all += st.Value
			if p.whole(st.Frames) {
				whole += st.Value
			} else if example == "" {
				example = describeFrames(st.Frames)
			}
		}
	}
	return ratio(whole, all), all, example
}

// stacks are the stacks of p's samples (of its sampleType, its thread's
// if tid is set) in pd.
func (p interpreted) stacks(pd pprofile.Profiles) []pdata.NamedStack {
	stacks := pdata.Stacks(pdata.OfPID(pdata.OfType(pd, p.sampleType), p.pid))
	if p.tid == 0 {
		return stacks
	}
	var mine []pdata.NamedStack
	for _, st := range stacks {
		if st.Attributes["thread.id"] == int64(p.tid) {
			mine = append(mine, st)
		}
	}
	return mine
}

func (p interpreted) whole(frames []pdata.NamedFrame) bool {
	var mine []pdata.NamedFrame
	via := p.via
	last := -1
	for i, f := range frames {
		if f.Type != p.typ {
			continue
		}
		last = i
		switch {
		case filepath.Base(f.File) == p.script:
			mine = append(mine, f)
		case len(mine) == 0 && f.File != "":
			return false // the leaf is the interpreter's, not the script's
		case len(mine) > 0 && len(via) > 0 && f.Function == via[0]:
			via = via[1:]
		}
	}
	if last < 0 || len(mine) != len(p.chain) || len(via) > 0 {
		return false
	}
	root := p.root
	if root == "" {
		root = "_start"
	}
	end := frames[len(frames)-1]
	if end.Function == "" {
		end.Function = filepath.Base(end.Mapping)
	}
	if last == len(frames)-1 || frames[last+1].Type != "native" || end.Function != root {
		return false
	}
	for i, w := range p.chain {
		if mine[i].Function != w.Function || (i > 0 && mine[i].Line != w.Line) {
			return false
		}
	}
	return true
}

// Ruby and PHP processes started after the collector, with no flag: Ruby
// 3.1 (with and without YJIT) and 3.3 running rubywork.rb, PHP 8.2 and 8.4
// (with opcache's tracing JIT and without opcache) running phpwork.php.
// Their CPU profiles through OTLP have the script's frames, named, in
// order, with their lines, frame types ruby and php, in place of the
// interpreter's native frames (a native frame below them) in at least 90%
// of their samples.
func TestCollectorRubyAndPHPFrames(t *testing.T) {
	rubies := testutil.RubyInterpreters(t)
	otlp := profileCPU(t, "'ruby', 'php'")

	rb := testutil.WorkloadLines(t, "rubywork.rb")
	rubyChain := []pdata.NamedFrame{
		{Function: "Burner#spin"},
		{Function: "block in Burner#work", Line: int64(rb["work_block"])},
		{Function: "Burner#work", Line: int64(rb["work_times"])},
		{Function: "<main>", Line: int64(rb["main"])},
	}
	var processes []interpreted
	for _, r := range rubies {
		modes := [][]string{nil}
		if r.Version == "3.1" && runtime.GOARCH == "amd64" { // 3.1's YJIT is x86-64's only
			modes = append(modes, []string{"--yjit"})
		}
		for _, extra := range modes {
			p := testutil.StartRuby(t, r, extra, "120")
			processes = append(processes, interpreted{name: strings.TrimSpace(r.Name + " " + strings.Join(extra, " ")),
				pid: p.Process.Pid, typ: "ruby", script: "rubywork.rb", chain: rubyChain, via: []string{"Integer#times"}, sampleType: "samples"})
		}
	}
	phpChain := phpWorkChain(t)
	for _, v := range testutil.PHPVersions {
		p := testutil.DebianPHP(t, v)
		for _, mode := range phpModes {
			cmd := testutil.StartPHP(t, p, p.Args(mode.opcache, mode.jit), "120")
			processes = append(processes, interpreted{name: "php " + v + " " + mode.name, pid: cmd.Process.Pid,
				typ: "php", script: "phpwork.php", chain: phpChain, sampleType: "samples"})
		}
	}

	requireWhole(t, otlp, processes, 200)
}

// Two Ractors in Ruby 3.1 and 3.3 processes started after the collector
// (rubyractor.rb), each running rubywork.rb's chain on a native thread of
// its own while the main thread waits: each Ractor's thread's CPU
// profile through OTLP has the script's frames, Burner#spin <- block in
// Burner#work <- Burner#work <- the Ractor's block, with their lines, in
// place of the interpreter's native frames, down to the thread's root
// (3.1: glibc's __clone3; 3.3 runs a non-main Ractor's threads on its M:N
// scheduler's coroutines, always, whose stacks begin at the coroutine's
// entry, co_start: an unnamed frame of Debian's stripped libruby whose
// return address is 0, where gdb's backtrace ends too), in at least 90%
// of its samples (of at least 200). The walker finds a Ractor's running
// thread as it does the main thread: its rb_execution_context_t in the
// native thread's ruby_current_ec.
func TestCollectorRubyRactorFrames(t *testing.T) {
	rubies := testutil.RubyInterpreters(t)
	otlp := profileCPU(t, "'ruby'")

	rb := testutil.WorkloadLines(t, "rubyractor.rb")
	chain := []pdata.NamedFrame{
		{Function: "Burner#spin"},
		{Function: "block in Burner#work", Line: int64(rb["work_block"])},
		{Function: "Burner#work", Line: int64(rb["work_times"])},
		{Function: "block in <main>", Line: int64(rb["ractor_work"])},
	}
	var threads []interpreted
	for _, r := range rubies {
		argv := append(append([]string{}, r.Args...), testutil.Workload(t, "rubyractor.rb"), "120")
		c := testutil.StartWorkloadChild(t, r.Path, argv...)
		// "ready", its pid, then each Ractor's thread's id.
		var lines [4]int
		for i := range lines {
			line := strings.TrimSpace(c.Line(t, testutil.Patient(testutil.ReadyTimeout)))
			if i == 0 {
				require.Equal(t, "ready", line, r.Name)
				continue
			}
			n, err := strconv.Atoi(line)
			require.NoError(t, err, r.Name)
			lines[i] = n
		}
		root := "__clone3"
		if r.Version != "3.1" {
			lib, err := filepath.EvalSymlinks(r.Lib)
			require.NoError(t, err)
			root = filepath.Base(lib)
		}
		for i, tid := range lines[2:] {
			threads = append(threads, interpreted{name: fmt.Sprintf("%s ractor %d (thread %d)", r.Name, i+1, tid),
				pid: lines[1], tid: tid, root: root, typ: "ruby", script: "rubyractor.rb", chain: chain,
				via: []string{"Integer#times"}, sampleType: "samples"})
		}
	}
	requireWhole(t, otlp, threads, 200)
}

// requireWhole waits for every process's samples (of its sampleType) to
// include whole ones, then for at least enough in the reports from 4 s
// after that (the tables and runtime loaded), and requires 90% of those
// whole.
func requireWhole(t *testing.T, otlp *otlpProfilesServer, processes []interpreted, enough int64) {
	everyOne := func(received func() []pprofile.Profiles, ok func(share float64, n int64) bool) func() bool {
		return func() bool {
			for _, p := range processes {
				if share, n, _ := p.share(received()); !ok(share, n) {
					return false
				}
			}
			return true
		}
	}
	if !assert.Eventually(t, everyOne(otlp.all, func(share float64, _ int64) bool { return share > 0 }),
		testutil.Patient(90*time.Second), 200*time.Millisecond) {
		t.Fatalf("no samples of some process walked whole: %s", describeShares(processes, otlp.all()))
	}
	from := latestWindow(otlp.all()).Add(4 * time.Second)
	later := func() []pprofile.Profiles { return windowsFrom(otlp.all(), from) }
	if !assert.Eventually(t, everyOne(later, func(_ float64, n int64) bool { return n >= enough }),
		testutil.Patient(90*time.Second), 500*time.Millisecond) {
		t.Fatalf("too few samples: %s", describeShares(processes, later()))
	}
	received := later()
	t.Log(describeShares(processes, received))
	lowest, lowestName := 1.0, ""
	for _, p := range processes {
		share, n, example := p.share(received)
		require.GreaterOrEqual(t, share, 0.90, "%s: %.1f%% of %d whole; e.g. %s", p.name, 100*share, n, example)
		if share <= lowest {
			lowest, lowestName = share, p.name
		}
	}
	matrixFigure(t, "%d processes whole, lowest %s %.1f%%", len(processes), lowestName, 100*lowest)
}

// A Ruby sleep and a PHP usleep, in processes started after the collector
// (Ruby 3.1 and 3.3, PHP 8.2 and 8.4): their off-CPU profiles through OTLP
// have the script's frames, nap <- work <- <main> / {main} with their
// lines, in place of the interpreter's native frames, in at least 90% of
// the time they waited (at least 2 s of it each).
func TestCollectorRubyAndPHPOffCPU(t *testing.T) {
	bin := collectorBinary(t)
	rubies := testutil.RubyInterpreters(t)
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(`    report_interval: 2s
    targets: {executables: ['ruby', 'php']}
    cpu: {enabled: false}
    off_cpu: {enabled: true, min_block: 1ms}
`, addr))
	waitReady(t, out)

	rb := testutil.WorkloadLines(t, "rubysleep.rb")
	var processes []interpreted
	for _, r := range rubies {
		argv := append(append([]string{}, r.Args...), testutil.Workload(t, "rubysleep.rb"), "120")
		cmd := testutil.StartReadyWorkload(t, r.Path, argv...)
		processes = append(processes, interpreted{name: r.Name, pid: cmd.Process.Pid, typ: "ruby", script: "rubysleep.rb",
			sampleType: "off_cpu", chain: []pdata.NamedFrame{
				{Function: "Napper#nap"},
				{Function: "Napper#work", Line: int64(rb["work_call"])},
				{Function: "<main>", Line: int64(rb["main"])},
			}})
	}
	ph := testutil.WorkloadLines(t, "phpsleep.php")
	for _, v := range testutil.PHPVersions {
		p := testutil.DebianPHP(t, v)
		argv := append(p.Args(false, ""), testutil.Workload(t, "phpsleep.php"), "120")
		cmd := testutil.StartReadyWorkload(t, p.Path, argv...)
		processes = append(processes, interpreted{name: "php " + v, pid: cmd.Process.Pid, typ: "php", script: "phpsleep.php",
			sampleType: "off_cpu", chain: []pdata.NamedFrame{
				{Function: "nap"},
				{Function: "work", Line: int64(ph["work_call"])},
				{Function: "{main}", Line: int64(ph["main_call"])},
			}})
	}
	requireWhole(t, otlp, processes, int64(2*time.Second))
}

// describeShares says, per process, its share of whole samples, and its
// most frequent stacks.
func describeShares(processes []interpreted, received []pprofile.Profiles) string {
	var b strings.Builder
	for _, p := range processes {
		share, n, _ := p.share(received)
		fmt.Fprintf(&b, "\n%s (pid %d): %.1f%% of %d (%s) whole", p.name, p.pid, 100*share, n, p.sampleType)
		counts := map[string]int64{}
		for _, pd := range received {
			for _, st := range p.stacks(pd) {
				counts[describeFrames(st.Frames)] += st.Value
			}
		}
		stacks := make([]string, 0, len(counts))
		for s := range counts {
			stacks = append(stacks, s)
		}
		sort.Slice(stacks, func(i, j int) bool { return counts[stacks[i]] > counts[stacks[j]] })
		for _, s := range stacks[:min(3, len(stacks))] {
			fmt.Fprintf(&b, "\n  %d: %s", counts[s], s)
		}
	}
	return b.String()
}

// Two Ruby threads taking turns burning CPU 3:1 of their own CPU time
// (rubysplit.rb), under Ruby 3.1 (with and without YJIT) and 3.3 started
// after the collector: their samples through OTLP, counted by the
// innermost of work_a and work_b in each stack, split 75% +- 5 points, of
// at least 1000 each (the binomial deviation of 300 would be 2.5 points).
func TestCollectorRubyThreadsSplit(t *testing.T) {
	rubies := testutil.RubyInterpreters(t)
	otlp := profileCPU(t, "'ruby'")

	var splits []rubySplit
	for _, r := range rubies {
		modes := [][]string{nil}
		if r.Version == "3.1" {
			modes = append(modes, []string{"--yjit"})
		}
		for _, extra := range modes {
			argv := append(append(append([]string{}, r.Args...), extra...), testutil.Workload(t, "rubysplit.rb"), "120")
			cmd := testutil.StartReadyWorkload(t, r.Path, argv...)
			splits = append(splits, rubySplit{strings.TrimSpace(r.Name + " " + strings.Join(extra, " ")), cmd.Process.Pid})
		}
	}
	// From the first report that has both methods of every process on,
	// the walker's entry in.
	both := func(received []pprofile.Profiles) bool {
		for _, s := range splits {
			if a, b := rubyWork(received, s.pid); a == 0 || b == 0 {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, func() bool { return both(otlp.all()) }, testutil.Patient(90*time.Second), 200*time.Millisecond) {
		t.Fatalf("work_a or work_b missing: %s", describeSplits(otlp.all(), splits))
	}
	from := latestWindow(otlp.all()).Add(2 * time.Second)
	later := func() []pprofile.Profiles { return windowsFrom(otlp.all(), from) }
	enough := func() bool {
		for _, s := range splits {
			if a, b := rubyWork(later(), s.pid); a+b < 1000 {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, enough, testutil.Patient(90*time.Second), 500*time.Millisecond) {
		t.Fatalf("too few samples: %s", describeSplits(later(), splits))
	}
	received := later()
	for _, s := range splits {
		a, b := rubyWork(received, s.pid)
		share := ratio(a, a+b)
		t.Logf("%s: work_a %d, work_b %d samples: %.3f", s.name, a, b, share)
		assert.InDelta(t, 0.75, share, 0.05, s.name)
	}
}

// rubyWork counts pid's CPU samples by the innermost of Object#work_a and
// Object#work_b in each stack (a turn's clock reads put a C function
// above it); samples with neither are left out.
func rubyWork(received []pprofile.Profiles, pid int) (a, b int64) {
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), pid)) {
			for _, f := range st.Frames {
				if f.Type != "ruby" {
					continue
				}
				if f.Function == "Object#work_a" {
					a += st.Value
					break
				}
				if f.Function == "Object#work_b" {
					b += st.Value
					break
				}
			}
		}
	}
	return a, b
}

// rubySplit is a process running rubysplit.rb.
type rubySplit struct {
	name string
	pid  int
}

// describeSplits says, per process, its samples of work_a and work_b and
// its newest stack.
func describeSplits(received []pprofile.Profiles, splits []rubySplit) string {
	var b strings.Builder
	for _, s := range splits {
		wa, wb := rubyWork(received, s.pid)
		newest := "none"
		for _, pd := range received {
			for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), s.pid)) {
				newest = describeFrames(st.Frames)
			}
		}
		fmt.Fprintf(&b, "\n%s (pid %d): work_a %d, work_b %d; e.g. %s", s.name, s.pid, wa, wb, newest)
	}
	return b.String()
}

// profileCPU starts a collector that samples the CPU at 99 Hz in the
// processes of the executables matching targets (a YAML flow list's items)
// and reports every 2 s to an OTLP server, returned once the collector is
// ready.
func profileCPU(t *testing.T, targets string) *otlpProfilesServer {
	bin := collectorBinary(t)
	otlp, addr := startOTLPServer(t)
	out := startCollector(t, bin, profilesTo(`    report_interval: 2s
    targets: {executables: [`+targets+`]}
    cpu: {samples_per_second: 99}
`, addr))
	waitReady(t, out)
	return otlp
}
