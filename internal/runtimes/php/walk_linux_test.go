package php

import (
	"debug/elf"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// liveReads is how many times TestWalkLive walks a workload's frames.
const liveReads = 50

// TestWalkLive runs testdata/workloads/phpwork.php on each Debian PHP, with
// and without opcache and its JIT, and walks its frames from /proc/PID/mem
// as the BPF walker will (Walk), naming each: most walks must find
// Spinner::spin <- work <- {main} in the workload's file, work and {main}
// at their call's line, {main} the run's entry, spin at one of its lines
// or none (its opline is stale: see walkLive). No BPF: it proves the
// layouts and the naming.
func TestWalkLive(t *testing.T) {
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			f, err := elf.Open(p.Path)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			require.Equal(t, v, in.RuntimeVersion())
			for _, mode := range []struct {
				name    string
				opcache bool
				jit     string
			}{
				{"interpreter", false, ""},
				{"opcache", true, ""},
				{"jit-function", true, "function"},
				{"jit-tracing", true, "tracing"},
			} {
				t.Run(mode.name, func(t *testing.T) {
					walkLive(t, in, p, p.Args(mode.opcache, mode.jit), lines)
				})
			}
		})
	}
}

// walkLive walks the frames of phpwork.php run by p with flags liveReads
// times, and checks them.
func walkLive(t *testing.T, in *Interpreter, p testutil.PHP, flags []string, lines map[string]int64) {
	cmd := testutil.StartPHP(t, p, flags, "30")
	walkPID(t, in, cmd.Process.Pid, p.Path, lines)
}

// walkPID walks the frames of process pid, which runs phpwork.php with the
// engine file exe, liveReads times, and checks them.
func walkPID(t *testing.T, in *Interpreter, pid int, exe string, lines map[string]int64) {
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	eg := in.ExecutorGlobals + testutil.LoadBias(t, pid, exe)
	script := testutil.Workload(t, "phpwork.php")
	proc := in.Process(mem, 0)

	chains := map[string]int{}
	spinLines := map[int64]int{}
	good := 0
	for range liveReads {
		time.Sleep(20 * time.Millisecond)
		frames, err := in.Layout.Walk(mem, eg, 64)
		var names []string
		type named struct {
			function, file string
			line           int64
			entry          bool
		}
		var got []named
		for _, w := range frames {
			fr, err := proc.Read(w.Object(), w.Position, time.Now())
			if err != nil {
				names = append(names, "?"+err.Error())
				continue
			}
			got = append(got, named{fr.Function, fr.File, fr.Line, w.Entry})
			entry := ""
			if w.Entry {
				entry = "*"
			}
			names = append(names, fmt.Sprintf("%s:%d%s", fr.Function, fr.Line, entry))
		}
		if err != nil {
			names = append(names, "!"+err.Error())
		}
		chains[strings.Join(names, " <- ")]++
		want := []named{
			{"Spinner::spin", script, 0, false},
			{"work", script, lines["work_call"], false},
			{"{main}", script, lines["main_call"], true},
		}
		if err != nil || len(got) != len(want) {
			continue
		}
		spinLines[got[0].line]++
		want[0].line = got[0].line
		// The innermost frame's opline is where its handlers last saved
		// it (the VM keeps the current one in a register): a line of
		// spin's, or 0 when it is not one of spin's ops (the function
		// JIT leaves it NULL).
		if got[0].line != 0 && (got[0].line < lines["spin_first"] || got[0].line > lines["spin_last"]) {
			want[0].line = -1
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			good++
		}
	}
	var report []string
	for c, n := range chains {
		report = append(report, fmt.Sprintf("%3d × %s", n, c))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(report)))
	t.Logf("%d of %d walks spin <- work <- {main}; spin at lines %v; the walks:\n%s", good, liveReads, spinLines, strings.Join(report, "\n"))
	require.GreaterOrEqual(t, good, liveReads*3/4, "walks finding Spinner::spin <- work <- {main} at the workload's lines")
}

var lineMarker = regexp.MustCompile(`//\s*line:(\w+)\s*$`)

// workloadLines returns the lines of phpwork.php marked "// line:NAME" by
// NAME, and spin's first and last lines (spin_first, spin_last: its
// declaration and closing brace).
func workloadLines(t *testing.T) map[string]int64 {
	b, err := os.ReadFile(testutil.Workload(t, "phpwork.php"))
	require.NoError(t, err)
	lines := map[string]int64{}
	inSpin := false
	for i, l := range strings.Split(string(b), "\n") {
		if m := lineMarker.FindStringSubmatch(l); m != nil {
			lines[m[1]] = int64(i + 1)
		}
		switch {
		case strings.Contains(l, "function spin("):
			lines["spin_first"], inSpin = int64(i+1), true
		case inSpin && l == "    }":
			lines["spin_last"], inSpin = int64(i+1), false
		}
	}
	for _, k := range []string{"work_call", "main_call", "spin_first", "spin_last"} {
		require.NotZero(t, lines[k], k)
	}
	return lines
}
