//go:build linux

package offcpu

import (
	"path/filepath"
	"slices"
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

// A Java thread sleeping in Thread.sleep under nap <- main (every JDK the
// machine has, no JVM flag): with unwind tables, at least 95% of its
// off-CPU time shows nap and main at the lines of their calls, in order,
// down to the thread's root, with both mechanisms.
func TestJavaOffCPU(t *testing.T) { forEachMechanism(t, testJavaOffCPU) }

func testJavaOffCPU(t *testing.T, mech Mechanism) {
	want := []report.Frame{{Function: "JavaSleep.nap", Line: 5}, {Function: "JavaSleep.main", Line: 11}}
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaSleep.java")
			// Measured from main's start: before it, a JVM on a cold
			// machine spends seconds compiling the source and loading classes.
			cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "60")
			pid := uint32(cmd.Process.Pid)
			tables, err := unwinder.OpenTables(procfs.FS{Root: "/proc"}, 0)
			require.NoError(t, err)
			defer func() { require.NoError(t, tables.Close()) }()
			tr := openTracer(t, Options{MinBlock: time.Millisecond, Mechanism: mech, TargetPIDs: []uint32{pid}, Unwind: tables})
			// The walker entry, and the tables.
			require.Eventually(t, func() bool { return tables.Stats().Runtimes["jvm"].Processes == 1 && tables.Loaded(pid) },
				time.Minute, 20*time.Millisecond)
			_, _, err = tr.Drain()
			require.NoError(t, err)
			time.Sleep(2 * time.Second)
			raw, _, err := tr.Drain()
			require.NoError(t, err)
			require.NoError(t, tr.Close())

			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			asm := &assemble.Assembler{Symbols: sym, Identities: pidOnly{}}
			prof, _ := asm.Assemble(report.KindOffCPU, time.Now(), time.Now(), 0, raw)
			// The Java main thread: the one whose stacks hold JavaSleep.main.
			byThread := map[uint32][]report.Sample{}
			var javaMain uint32
			for _, p := range prof.Processes {
				for _, s := range p.Samples {
					byThread[s.TID] = append(byThread[s.TID], s)
					if slices.ContainsFunc(s.Frames, func(f report.Frame) bool { return f.Function == "JavaSleep.main" }) {
						javaMain = s.TID
					}
				}
			}
			require.NotZero(t, javaMain, "no off-CPU stack holds JavaSleep.main")
			var whole, total int64
			example := ""
			for _, s := range byThread[javaMain] {
				total += s.Value
				if javaChain(s.Frames, want) {
					whole += s.Value
				} else if example == "" {
					example = describe(s.Frames)
				}
			}
			share := float64(whole) / float64(max(total, 1))
			t.Logf("%.1f%% of %v off-CPU of the Java main thread whole", 100*share, time.Duration(total))
			require.GreaterOrEqual(t, total, int64(time.Second), "the thread blocked %v in 2 s", time.Duration(total))
			require.GreaterOrEqual(t, share, 0.95, "e.g. %s", example)
		})
	}
}

// javaChain says whether frames hold the Java frames of want in order, at
// their lines, and end at a thread's root.
func javaChain(frames []report.Frame, want []report.Frame) bool {
	i := 0
	for _, f := range frames {
		if i < len(want) && f.Function == want[i].Function && f.Line == want[i].Line && f.Type == "jvm" {
			i++
		}
	}
	return i == len(want) && len(frames) > 0 && frames[len(frames)-1].Function != "" &&
		slices.ContainsFunc(frames, func(f report.Frame) bool { return f.Function == "start_thread" })
}
