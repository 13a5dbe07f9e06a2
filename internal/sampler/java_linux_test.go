//go:build linux

package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A JVM started with no flag (no perf map, no frame pointers): the
// compiled Java method burning the CPU is named in its samples' leaf
// frame, with its source file, under OpenJDK 17 and Temurin 25.
func TestJavaLeafNamed(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
			cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "30")
			pid := uint32(cmd.Process.Pid)
			time.Sleep(4 * time.Second) // compiled by then
			s := openSampler(t, Options{SamplesPerSecond: 99, TargetPIDs: []uint32{pid}})
			samples, _, _ := sampleFor(t, s, 5*time.Second)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var total, named, withFile int
			for _, st := range samples {
				if st.PID != pid {
					continue
				}
				frames := sym.User(st.PID, st.Addresses(capture.UserFrame))
				total += int(st.Value)
				if len(frames) > 0 && frames[0].Function == "JavaBurn.spin" {
					named += int(st.Value)
					if frames[0].File == "JavaBurn.java" && frames[0].Type == "jvm" {
						withFile += int(st.Value)
					}
				}
			}
			t.Logf("JavaBurn.spin named in the leaf of %d of %d samples (%d with its file)", named, total, withFile)
			require.GreaterOrEqual(t, total, 100)
			assert.GreaterOrEqual(t, float64(named)/float64(total), 0.9)
			assert.Equal(t, named, withFile)
		})
	}
}

// A JVM started with no flag: with the HotSpot walker, the samples of the
// method burning the CPU are whole, through its compiled frame, the
// interpreted frame of main that called it (named: the walker reads its
// Method), the launcher's frames, the call stub and libjvm, to the thread's
// root; without tables (frame pointers only) they end at the first Java
// frame.
func TestJavaStacksWhole(t *testing.T) {
	testutil.RequireBPF(t)
	c := chain{callers: []string{"JavaBurn.spin", "JavaBurn.main", "JavaCalls::call_helper", "JavaMain"}, roots: threadRoots}
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
			cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "60")
			pid := uint32(cmd.Process.Pid)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			time.Sleep(4 * time.Second) // compiled by then
			for _, tables := range []bool{false, true} {
				ut := openTables(t, tables)
				s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: ut})
				awaitTables(t, ut, pid)
				if tables {
					// The JVM's walker entry: at the latest a sweep after its tables.
					require.Eventually(t, func() bool { return ut.Stats().Runtimes["jvm"].Processes == 1 }, 20*time.Second, 50*time.Millisecond)
				}
				raw, st, _ := sampleFor(t, s, 4*time.Second)
				_ = s.Close()
				share, n, example := c.assembledShare(sym, pid, raw)
				t.Logf("tables %v: %.1f%% of %d samples whole; unwind ends %v, %d frames", tables, 100*share, n, st.UnwindEnds, st.UnwindFrames)
				require.GreaterOrEqual(t, n, int64(200), "samples with leaf JavaBurn.spin")
				if tables {
					assert.GreaterOrEqual(t, share, 0.95, "e.g. %s", strings.Join(example, " <- "))
				} else {
					assert.Less(t, share, 0.5, "frame pointers alone give whole stacks: the test does not test the walker")
				}
			}
		})
	}
}

// assembledShare is share on the stacks as the assembler builds them
// (runtime frames in place).
func (c chain) assembledShare(sym *symbolize.Symbolizer, pid uint32, raw []capture.RawStack) (share float64, total int64, example []string) {
	var whole int64
	for _, smp := range pidSamples(sym, pid, raw) {
		var names []string
		for _, f := range smp.Frames {
			names = append(names, f.Function)
		}
		if len(names) == 0 || names[0] != c.callers[0] {
			continue
		}
		total += smp.Value
		if c.whole(names) {
			whole += smp.Value
		} else if example == nil {
			example = names
		}
	}
	if total == 0 {
		return 0, 0, nil
	}
	return float64(whole) / float64(total), total, example
}

// pidSamples returns pid's samples of raw as the assembler builds them.
func pidSamples(sym *symbolize.Symbolizer, pid uint32, raw []capture.RawStack) []report.Sample {
	a := assemble.Assembler{Symbols: sym, Identities: pidIdentity{}}
	prof, _ := a.Assemble(report.KindCPU, time.Now(), time.Now(), 1, raw)
	for _, p := range prof.Processes {
		if p.Identity.PID == pid {
			return p.Samples
		}
	}
	return nil
}

// unshareChild returns the host pid of the child of cmd (unshare --fork)
// once it runs an executable match accepts.
func unshareChild(t *testing.T, cmd *exec.Cmd, match func(exe string) bool) uint32 {
	t.Helper()
	var pid uint32
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
		if err != nil {
			return false
		}
		for _, f := range strings.Fields(string(b)) {
			if exe, _ := os.Readlink(filepath.Join("/proc", f, "exe")); match(exe) {
				p, _ := strconv.ParseUint(f, 10, 32)
				pid = uint32(p)
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
	return pid
}

// A compiled method calling through a method the JIT inlined: its samples
// show burn <- step (inlined, a frame of its own) <- loop <- main, each
// caller at the line of its call, the interpreted main's read from its
// bytecode index, the compiled frames' from their code's debug
// information.
func TestJavaInlinedFramesAndLines(t *testing.T) {
	testutil.RequireBPF(t)
	want := []report.Frame{
		{Function: "JavaInline.step", File: "JavaInline.java", Line: 13, Inlined: true},
		{Function: "JavaInline.loop", File: "JavaInline.java", Line: 19},
		{Function: "JavaInline.main", File: "JavaInline.java", Line: 28},
	}
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaInline.java")
			cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m",
				"-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,JavaInline::burn", src, "60")
			pid := uint32(cmd.Process.Pid)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var total, whole int64
			var example []string
			for _, smp := range pidSamples(sym, pid, sampleJava(t, pid)) {
				if len(smp.Frames) == 0 || smp.Frames[0].Function != "JavaInline.burn" {
					continue
				}
				total += smp.Value
				if callersAt(smp.Frames[1:], want) {
					whole += smp.Value
				} else if example == nil {
					for _, f := range smp.Frames {
						example = append(example, fmt.Sprintf("%s:%d inlined=%v", f.Function, f.Line, f.Inlined))
					}
				}
			}
			t.Logf("%d of %d samples of burn with its callers inlined and at their lines", whole, total)
			require.GreaterOrEqual(t, total, int64(200))
			assert.GreaterOrEqual(t, float64(whole)/float64(total), 0.9, "e.g. %s", strings.Join(example, " <- "))
		})
	}
}

// callersAt says whether frames begin with want: the same functions,
// files, lines and inlining.
func callersAt(frames, want []report.Frame) bool {
	if len(frames) < len(want) {
		return false
	}
	for i, w := range want {
		f := frames[i]
		if f.Function != w.Function || f.File != w.File || f.Line != w.Line || f.Inlined != w.Inlined {
			return false
		}
	}
	return true
}

// A JVM started after the profiler: its tables load 100 ms after its exec,
// before the JVM has made its code cache; its walker entry comes at a later
// sweep, and its stacks are whole from then on.
func TestJavaStartedAfterProfiler(t *testing.T) {
	testutil.RequireBPF(t)
	jdk := testutil.JDKs(t)[0]
	ut := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 99, Unwind: ut})
	src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
	began := time.Now()
	cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "60")
	pid := uint32(cmd.Process.Pid)
	require.Eventually(t, func() bool { return ut.Stats().Runtimes["jvm"].Processes >= 1 }, 30*time.Second, 50*time.Millisecond)
	t.Logf("the JVM's walker entry %v after its start", time.Since(began).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // compiled by then
	raw, _, _ := sampleFor(t, s, 3*time.Second)
	c := chain{callers: []string{"JavaBurn.spin", "JavaBurn.main", "JavaCalls::call_helper", "JavaMain"}, roots: threadRoots}
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	share, n, example := c.assembledShare(sym, pid, raw)
	t.Logf("%.1f%% of %d samples whole", 100*share, n)
	require.GreaterOrEqual(t, n, int64(100))
	assert.GreaterOrEqual(t, share, 0.95, "e.g. %s", strings.Join(example, " <- "))
}

// Two Java threads taking turns burning CPU 3:1 come out 75% +- 5 points,
// by the method each burns in; and a JVM running interpreted only
// (-Xint: what the first seconds of every JVM are) shows the same chain as
// compiled code, main at the line of its call.
func TestJavaSplitAndInterpreted(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			t.Run("split", func(t *testing.T) {
				src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaSplit.java")
				cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx64m", src, "60")
				byWork := javaWork(t, sym, uint32(cmd.Process.Pid), "JavaSplit.workA", "JavaSplit.workB")
				a, b := byWork["JavaSplit.workA"], byWork["JavaSplit.workB"]
				t.Logf("workA %d, workB %d samples: %.3f", a, b, float64(a)/float64(a+b))
				require.GreaterOrEqual(t, a+b, int64(300))
				assert.InDelta(t, 0.75, float64(a)/float64(a+b), 0.05)
			})
			t.Run("interpreted", func(t *testing.T) {
				src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
				cmd := testutil.StartReadyWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xint", "-Xmx64m", src, "60")
				pid := uint32(cmd.Process.Pid)
				raw := sampleJava(t, pid)
				c := chain{callers: []string{"JavaBurn.spin", "JavaBurn.main", "JavaCalls::call_helper", "JavaMain"}, roots: threadRoots}
				share, n, example := c.assembledShare(sym, pid, raw)
				t.Logf("interpreted: %.1f%% of %d samples whole", 100*share, n)
				require.GreaterOrEqual(t, n, int64(200))
				assert.GreaterOrEqual(t, share, 0.9, "e.g. %s", strings.Join(example, " <- "))
				main := callerLines(sym, pid, raw, "JavaBurn.spin", "JavaBurn.main")
				assert.Equal(t, map[int64]bool{16: true}, main, "main's lines under spin")
			})
		})
	}
}

// sampleJava samples pid for 4 s with unwind tables once its JVM's walker
// entry is in and its code had 4 s to compile.
func sampleJava(t *testing.T, pid uint32) []capture.RawStack {
	t.Helper()
	time.Sleep(4 * time.Second)
	ut := openTables(t, true)
	s := openSampler(t, Options{SamplesPerSecond: 199, TargetPIDs: []uint32{pid}, Unwind: ut})
	awaitTables(t, ut, pid)
	require.Eventually(t, func() bool { return ut.Stats().Runtimes["jvm"].Processes == 1 }, 20*time.Second, 50*time.Millisecond)
	raw, _, _ := sampleFor(t, s, 4*time.Second)
	_ = s.Close()
	return raw
}

// javaWork samples pid's JVM and returns its samples by the innermost of
// works in each stack (a turn's clock reads put libjvm and the kernel above
// it).
func javaWork(t *testing.T, sym *symbolize.Symbolizer, pid uint32, works ...string) map[string]int64 {
	out := map[string]int64{}
	for _, smp := range pidSamples(sym, pid, sampleJava(t, pid)) {
		for _, f := range smp.Frames {
			if slices.Contains(works, f.Function) {
				out[f.Function] += smp.Value
				break
			}
		}
	}
	return out
}

// callerLines returns the lines at which function's frames are in pid's
// samples whose leaf is leaf (other samples of it may be at other lines:
// main calling System.nanoTime).
func callerLines(sym *symbolize.Symbolizer, pid uint32, raw []capture.RawStack, leaf, function string) map[int64]bool {
	lines := map[int64]bool{}
	for _, smp := range pidSamples(sym, pid, raw) {
		if len(smp.Frames) == 0 || smp.Frames[0].Function != leaf {
			continue
		}
		for _, f := range smp.Frames {
			if f.Function == function {
				lines[f.Line] = true
			}
		}
	}
	return lines
}

// A JVM in a child pid namespace (pid 1 there, as in a container): its
// stacks are whole, its methods named.
func TestJavaInPIDNamespace(t *testing.T) {
	testutil.RequireBPF(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare not found")
	}
	java := filepath.Join(testutil.JDKs(t)[0], "bin", "java")
	src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads", "JavaBurn.java")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", java, "-Xmx64m", src, "60")
	testutil.StartChild(t, cmd)
	// The JVM is unshare's child (host pid), once it has exec'ed java.
	pid := unshareChild(t, cmd, func(exe string) bool { return strings.HasSuffix(exe, "/bin/java") })
	defer func() { _ = syscall.Kill(int(pid), syscall.SIGKILL) }()
	raw := sampleJava(t, pid)
	sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
	defer sym.Close()
	c := chain{callers: []string{"JavaBurn.spin", "JavaBurn.main", "JavaCalls::call_helper", "JavaMain"}, roots: threadRoots}
	share, n, example := c.assembledShare(sym, pid, raw)
	t.Logf("in a pid namespace (host pid %d): %.1f%% of %d samples whole", pid, 100*share, n)
	require.GreaterOrEqual(t, n, int64(200))
	assert.GreaterOrEqual(t, share, 0.95, "e.g. %s", strings.Join(example, " <- "))
}

// javac compiling in a loop (the JDK's own compiler: deep stacks, lambdas,
// interface calls, and code the JIT keeps compiling, so the code heaps grow
// while it is sampled): at least 95% of its samples in javac's code reach
// the thread's root, every Java frame named.
func TestJavacStacksWhole(t *testing.T) {
	testutil.RequireBPF(t)
	for _, jdk := range testutil.JDKs(t) {
		t.Run(filepath.Base(jdk), func(t *testing.T) {
			src := filepath.Join(testutil.RepoRoot(t), "testdata", "workloads")
			cmd := testutil.StartWorkload(t, filepath.Join(jdk, "bin", "java"), "-Xmx512m", filepath.Join(src, "JavaCompile.java"),
				filepath.Join(src, "JavaSplit.java"), t.TempDir(), "60")
			pid := uint32(cmd.Process.Pid)
			raw := sampleJava(t, pid)
			sym := symbolize.New(symbolize.Options{Proc: procfs.FS{Root: "/proc"}})
			defer sym.Close()
			var javac, whole, javaFrames, unnamed int64
			var example []string
			for _, smp := range pidSamples(sym, pid, raw) {
				inJavac, root := false, false
				for _, f := range smp.Frames {
					inJavac = inJavac || strings.HasPrefix(f.Function, "com.sun.tools.javac.")
					root = root || slices.Contains(threadRoots, f.Function)
					if f.Type == report.FrameJVM {
						javaFrames += smp.Value
						if f.Function == "" {
							unnamed += smp.Value
						}
					}
				}
				if !inJavac {
					continue
				}
				javac += smp.Value
				if root {
					whole += smp.Value
				} else if example == nil {
					for _, f := range smp.Frames {
						example = append(example, f.Function)
					}
				}
			}
			t.Logf("javac: %d of %d samples whole; %d Java frames, %d unnamed", whole, javac, javaFrames, unnamed)
			require.GreaterOrEqual(t, javac, int64(300))
			assert.GreaterOrEqual(t, float64(whole)/float64(javac), 0.95, "e.g. %s", strings.Join(example, " <- "))
			assert.Zero(t, unnamed, "Java frames without a name")
		})
	}
}
