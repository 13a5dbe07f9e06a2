//go:build linux

package e2e

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/pproffile"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Off-CPU profiling alone (cpu disabled): two threads sleep 100 times, one
// 30 ms at a time in sleep_long, the other 10 ms in sleep_short. The
// profile's totals match the blocked time the workload measured itself (3:1),
// and the stacks hold both the kernel frames where the threads blocked and
// the user frames that called the sleep.
func TestCollectorOffCPUProfile(t *testing.T) {
	bin := collectorBinary(t)
	pprofDir := t.TempDir()
	work := exec.Command(testutil.BuildC(t, "sleepers.c"), "ratio", "100")
	stdin, err := work.StdinPipe()
	require.NoError(t, err)
	c := testutil.StartChild(t, work)
	t.Cleanup(func() { _ = stdin.Close() })  // before the Child's kill
	c.Line(t, testutil.Patient(time.Minute)) // the workload's pid

	out := startCollector(t, bin, fmt.Sprintf(`
receivers:
  bpfprofiler:
    report_interval: 1s
    targets: {pids: [%d]}
    cpu: {enabled: false}
    off_cpu: {enabled: true, min_block: 1ms}
    pprof: {directory: %s}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    profiles: {receivers: [bpfprofiler], exporters: [debug]}
`, work.Process.Pid, pprofDir))
	waitReady(t, out)

	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	// Blocked ns the workload measured, by function (wall time less CPU
	// time, which includes the kernel's and the tracer's work at each
	// switch-in), and the wall time around its sleeps: the profile lies
	// between them.
	truth, wall := map[string]int64{}, map[string]int64{}
	// 100 sleeps of 30 ms, then the results.
	results := c.Until(t, testutil.Patient(time.Minute), func(line string) bool { return line == "done" })
	for _, line := range results[:len(results)-1] {
		if f := strings.Fields(line); len(f) == 6 {
			truth[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
			wall[f[0]], _ = strconv.ParseInt(f[5], 10, 64)
		}
	}
	require.Contains(t, truth, "sleep_long", "the workload did not finish")
	// Every wait has ended: the next reports hold all of them.
	var totals map[string]int64
	require.Eventually(t, func() bool {
		totals = pprofTotals(t, pprofDir, "offcpu")
		return totals["sleep_long"] >= truth["sleep_long"]*95/100 && totals["sleep_short"] >= truth["sleep_short"]*95/100
	}, 30*time.Second, 500*time.Millisecond, "off-CPU totals short of the truth")
	time.Sleep(1500 * time.Millisecond) // one more report: nothing more may arrive
	totals = pprofTotals(t, pprofDir, "offcpu")

	got := ratio(totals["sleep_long"], totals["sleep_short"])
	want := ratio(truth["sleep_long"], truth["sleep_short"])
	st := sleepStacks(t, pprofDir)
	t.Logf("profile: sleep_long %d ns, sleep_short %d ns; workload: %v to %v", totals["sleep_long"], totals["sleep_short"], truth, wall)
	mechanism := "?"
	if m := regexp.MustCompile(`"mechanism": "(\w+)"`).FindStringSubmatch(out.String()); m != nil {
		mechanism = m[1]
	}
	matrixFigure(t, "%s: long/short %.2f (workload %.2f), kernel frames %.1f%%, callers %.1f%%",
		mechanism, got, want, 100*st.kernel(), 100*st.chains())
	for _, fn := range []string{"sleep_long", "sleep_short"} {
		dev := testutil.OutsideBy(float64(totals[fn]), float64(truth[fn]), float64(wall[fn]))
		assert.LessOrEqual(t, math.Abs(dev), 0.03, "%s: profile %d ns, the workload's own measurement %d to %d ns",
			fn, totals[fn], truth[fn], wall[fn])
	}
	assert.InEpsilon(t, want, got, 0.05)
	assert.GreaterOrEqual(t, st.kernel(), 0.95, "blocked time whose stack has kernel frames")
	assert.GreaterOrEqual(t, st.chains(), 0.95, "blocked time in sleep_* whose caller is run")
	assert.Contains(t, out.String(), "off_cpu")

	cpuFiles, _ := filepath.Glob(filepath.Join(pprofDir, "cpu-*.pb.gz"))
	assert.Empty(t, cpuFiles, "cpu sampling is disabled")
}

// sleepTotals is the blocked time in sleep_long/sleep_short: all of it,
// that with kernel frames, and that whose sleep_* frame has run as caller.
type sleepTotals struct{ all, withKernel, chained int64 }

func (s sleepTotals) kernel() float64 { return ratio(s.withKernel, s.all) }
func (s sleepTotals) chains() float64 { return ratio(s.chained, s.all) }

func sleepStacks(t *testing.T, dir string) sleepTotals {
	var st sleepTotals
	for _, p := range readPprof(t, dir, "offcpu") {
		for _, s := range p.Sample {
			names, kernel := stackNames(s)
			for i, fn := range names {
				if fn != "sleep_long" && fn != "sleep_short" {
					continue
				}
				st.all += s.Value[0]
				if kernel {
					st.withKernel += s.Value[0]
				}
				if i+1 < len(names) && names[i+1] == "run" {
					st.chained += s.Value[0]
				}
				break
			}
		}
	}
	return st
}

// stackNames returns the function names of a pprof sample, leaf first, and
// whether it has kernel frames.
func stackNames(s *profile.Sample) (names []string, kernel bool) {
	for _, loc := range s.Location {
		if loc.Mapping != nil && loc.Mapping.File == pproffile.KernelMappingFile {
			kernel = true
		}
		for _, l := range loc.Line {
			if l.Function != nil {
				names = append(names, l.Function.Name)
			}
		}
	}
	return names, kernel
}
