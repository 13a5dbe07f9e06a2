//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A JVM started with no profiling flag (OpenJDK 17), profiled by the
// collector: at least 90% of the samples of its compiled leaf burn show
// step (which the JIT inlined) <- loop <- main at the lines of their calls,
// with profile.frame.type jvm and the file JavaInline.java, above the JVM's
// native frames down to the thread's root.
// javaInlineFlags are the JVM flags JavaInline runs with: burn stays a
// method of its own (a leaf the checks find), step is inlined into loop.
var javaInlineFlags = []string{"-Xmx64m", "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,JavaInline::burn"}

// javaInlineChain are JavaInline's frames above burn, at their lines.
var javaInlineChain = []pdata.NamedFrame{
	{Function: "JavaInline.step", Line: 13},
	{Function: "JavaInline.loop", Line: 19},
	{Function: "JavaInline.main", Line: 28},
}

func TestCollectorJavaFrames(t *testing.T) {
	testutil.RequireBPF(t)
	bin := collectorBinary(t)
	java := filepath.Join(testutil.JDKs(t)[0], "bin", "java")
	otlp, addr := startOTLPServer(t)
	args := append(slices.Clone(javaInlineFlags), testutil.JavaWorkload(t, "JavaInline")...)
	cmd := testutil.StartWorkload(t, java, append(args, "600")...)
	pid := cmd.Process.Pid
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: [%d]}
    cpu: {samples_per_second: 99}
`, pid), addr))
	waitReady(t, out)
	want := javaInlineChain
	// The first reports come before the JVM's code is compiled and its
	// walker entry made (slowly on an emulated kernel): they are left out.
	first := testutil.Patient(3 * time.Minute)
	if !assert.Eventually(t, func() bool {
		share, _, _ := javaChain(otlp.all(), pid, want)
		return share > 0.5
	}, first, 500*time.Millisecond) {
		t.Fatalf("no whole Java stacks in %v; e.g. %s", first, javaExample(otlp.all(), pid))
	}
	skip := len(otlp.all())
	later := func() []pprofile.Profiles { return otlp.all()[skip:] }
	var n int64
	if !assert.Eventually(t, func() bool { _, n, _ = javaChain(later(), pid, want); return n >= 300 }, 2*time.Minute, 500*time.Millisecond) {
		t.Fatalf("%d samples of JavaInline.burn, want 300", n)
	}
	share, n, example := javaChain(later(), pid, want)
	t.Logf("%.1f%% of %d samples of burn whole", 100*share, n)
	matrixFigure(t, "burn <- step (inlined) <- loop <- main at their lines: %.1f%% of %d samples", 100*share, n)
	assert.GreaterOrEqual(t, share, 0.9, "e.g. %s", example)
}

// javaChain is the share of the samples of pid whose leaf is JavaInline.burn
// (any line) that have the frames of want next, at their lines, as Java
// frames of JavaInline.java, and reach start_thread; their number and an
// example of one that is not.
func javaChain(received []pprofile.Profiles, pid int, want []pdata.NamedFrame) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), pid)) {
			if len(st.Frames) == 0 || st.Frames[0].Function != "JavaInline.burn" {
				continue
			}
			all += st.Value
			if javaWhole(st.Frames, want) {
				whole += st.Value
			} else if example == "" {
				example = describeFrames(st.Frames)
			}
		}
	}
	return ratio(whole, all), all, example
}

// javaExample describes the newest stack of pid whose leaf is
// JavaInline.burn, else the newest stack of pid.
func javaExample(received []pprofile.Profiles, pid int) string {
	other := fmt.Sprintf("no stack of pid %d (%d reports)", pid, len(received))
	for i := len(received) - 1; i >= 0; i-- {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(received[i], "samples"), pid)) {
			if len(st.Frames) > 0 && st.Frames[0].Function == "JavaInline.burn" {
				return describeFrames(st.Frames)
			}
			if strings.HasPrefix(other, "no stack") {
				other = "none with JavaInline.burn as its leaf; newest: " + describeFrames(st.Frames)
			}
		}
	}
	return other
}

func javaWhole(frames, want []pdata.NamedFrame) bool {
	if len(frames) < len(want)+1 {
		return false
	}
	for i, w := range want {
		f := frames[i+1]
		if f.Function != w.Function || f.Line != w.Line || f.Type != "jvm" || filepath.Base(f.File) != "JavaInline.java" {
			return false
		}
	}
	for _, f := range frames {
		if strings.HasPrefix(f.Function, "start_thread") {
			return true
		}
	}
	return false
}

// Every JDK the machine has (OpenJDK 17, Temurin 25), started with no flag
// beside each other under one collector: JavaHot.spin <- JavaHot.work <-
// JavaHot.main, as Java frames, in at least 95% of each main thread's
// samples once compiled (a leaf the walker cannot name, or spin without
// its callers, counts against it).
func TestCollectorJavaChainOnEveryJDK(t *testing.T) {
	testutil.RequireBPF(t)
	bin := collectorBinary(t)
	otlp, addr := startOTLPServer(t)
	want := []string{"JavaHot.spin", "JavaHot.work", "JavaHot.main"}
	var pids []int
	names := map[int]string{}
	for _, jdk := range testutil.JDKs(t) {
		cmd := testutil.StartWorkload(t, filepath.Join(jdk, "bin", "java"), append([]string{"-Xmx64m"}, append(testutil.JavaWorkload(t, "JavaHot"), "600")...)...)
		pids = append(pids, cmd.Process.Pid)
		names[cmd.Process.Pid] = filepath.Base(jdk)
	}
	out := startCollector(t, bin, profilesTo(fmt.Sprintf(`    report_interval: 2s
    targets: {pids: %v}
    cpu: {samples_per_second: 99}
`, strings.ReplaceAll(fmt.Sprint(pids), " ", ", ")), addr))
	waitReady(t, out)
	// The first reports come before the JIT compiles spin and work.
	first := testutil.Patient(3 * time.Minute)
	compiled := func() bool {
		for _, pid := range pids {
			if share, _, _ := javaMainChain(otlp.all(), pid, want); share <= 0.5 {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, compiled, first, 500*time.Millisecond) {
		for _, pid := range pids {
			share, n, example := javaMainChain(otlp.all(), pid, want)
			t.Logf("%s: %.1f%% of %d whole, e.g. %s", names[pid], 100*share, n, example)
		}
		t.FailNow()
	}
	skip := len(otlp.all())
	later := func() []pprofile.Profiles { return otlp.all()[skip:] }
	enough := func() bool {
		for _, pid := range pids {
			if _, n, _ := javaMainChain(later(), pid, want); n < 300 {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, enough, testutil.Patient(2*time.Minute), 500*time.Millisecond) {
		t.Fatal("too few samples of the main threads")
	}
	for _, pid := range pids {
		share, n, example := javaMainChain(later(), pid, want)
		t.Logf("%s: %s in %.1f%% of %d main-thread samples", names[pid], strings.Join(want, " <- "), 100*share, n)
		assert.GreaterOrEqual(t, share, 0.95, "%s: e.g. %s", names[pid], example)
	}
}

// javaMainChain is the share of the samples of pid's main Java thread
// whose frames begin with want (leaf first) as Java frames, their number
// and an example of one that does not.
func javaMainChain(received []pprofile.Profiles, pid int, want []string) (float64, int64, string) {
	var all, whole int64
	example := ""
	for _, pd := range received {
		for _, st := range pdata.Stacks(pdata.OfPID(pdata.OfType(pd, "samples"), pid)) {
			if !javaThreads(st, pid) {
				continue
			}
			all += st.Value
			ok := len(st.Frames) >= len(want)
			for i := 0; ok && i < len(want); i++ {
				ok = st.Frames[i].Function == want[i] && st.Frames[i].Type == "jvm"
			}
			if ok {
				whole += st.Value
			} else if example == "" {
				example = describeFrames(st.Frames)
			}
		}
	}
	return ratio(whole, all), all, example
}
