//go:build linux

package offcpu

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// A CPython main thread sleeping in time.sleep under nap (3.9 to 3.13,
// pyenv's and Debian's static 3.11): with unwind tables, at least 95% of
// its off-CPU time has the Python frames nap <- main <- <module> at their
// lines, in the native stack (a native frame below <module>), with both
// mechanisms.
func TestPythonOffCPU(t *testing.T) { forEachMechanism(t, testPythonOffCPU) }

func testPythonOffCPU(t *testing.T, mech Mechanism) {
	lines := testutil.PythonLines(t)
	want := []string{
		fmt.Sprintf("nap:%d", lines["nap_call"]),
		fmt.Sprintf("main:%d", lines["main_nap"]),
		fmt.Sprintf("<module>:%d", lines["module_main"]),
	}
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Name, func(t *testing.T) {
			cmd := testutil.StartPython(t, in, "sleep", "30")
			pid := uint32(cmd.Process.Pid)
			tables, err := unwinder.OpenTables(procfs.FS{Root: "/proc"}, 0)
			require.NoError(t, err)
			defer func() { require.NoError(t, tables.Close()) }()
			tr := openTracer(t, Options{MinBlock: time.Millisecond, Mechanism: mech, TargetPIDs: []uint32{pid}, Unwind: tables})
			// The first waits announce the process; its tables load then.
			require.Eventually(t, func() bool { return tables.Loaded(pid) }, time.Minute, 20*time.Millisecond)
			_, _, err = tr.Drain()
			require.NoError(t, err)
			time.Sleep(2 * time.Second)
			raw, st, err := tr.Drain()
			require.NoError(t, err)
			require.NoError(t, tr.Close())

			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			asm := &assemble.Assembler{Symbols: sym, Identities: pidOnly{}}
			prof, _ := asm.Assemble(report.KindOffCPU, time.Now(), time.Now(), 0, raw)
			var whole, total int64
			example := ""
			for _, p := range prof.Processes {
				for _, s := range p.Samples {
					if s.TID != pid {
						continue
					}
					total += s.Value
					if got := pythonFrames(s.Frames); got == strings.Join(want, " <- ") {
						whole += s.Value
					} else if example == "" {
						example = describe(s.Frames)
					}
				}
			}
			share := float64(whole) / float64(max(total, 1))
			t.Logf("%.1f%% of %v off-CPU whole; python walks %v, %d frames, %d lost",
				100*share, time.Duration(total), st.PythonEnds, st.PythonFrames, st.PythonStackLost)
			if total < int64(time.Second) {
				t.Fatalf("the main thread blocked %v in 2 s, want at least 1 s", time.Duration(total))
			}
			if share < 0.95 {
				t.Errorf("%.1f%% of the off-CPU time whole, want >= 95%%; e.g. %s", 100*share, example)
			}
		})
	}
}

// pythonFrames returns the Python frames of frames as "function:line"
// joined leaf first, or "" when they are not inside the native stack (a
// native frame below the last one).
func pythonFrames(frames []report.Frame) string {
	var py []string
	last := -1
	for i, f := range frames {
		if f.Type == report.FramePython {
			py = append(py, fmt.Sprintf("%s:%d", f.Function, f.Line))
			last = i
		}
	}
	if last < 0 || last == len(frames)-1 || frames[last+1].Type != report.FrameNative {
		return ""
	}
	return strings.Join(py, " <- ")
}
