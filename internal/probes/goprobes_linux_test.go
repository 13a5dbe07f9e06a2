package probes

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A Go method probed by `symbol:` (uprobes after its stack check and on
// its returns, no uretprobe) times each call per goroutine: 1,000 HTTP
// requests from 16 clients, each call sleeping, blocking on a channel
// (most resume on another thread) and growing its stack, give one record
// per call that returned, each inside the call as the handler measured it
// and within 1 ms of its duration; the calls that panicked out (no return)
// give none, and their scopes are dropped at the goroutine's next entry
// (Abandoned), not paired with a later call. Each record carries its
// call's goroutine labels ({request: n}, set around the call). A function
// without a return instruction is refused. Built by the oldest and newest
// Go toolchains the probes support (labels in a map, and in a slice) and
// the machine's, that one also with a garbage collection at every 1% of
// heap growth (each shrinks the stacks of goroutines using little of
// theirs, so of calls parked inside the probed method) and 8 Ps on 2 CPUs
// (more migrations): stacks moved inside calls, the process unharmed.
func TestGoFunctionScopes(t *testing.T) {
	testutil.RequireBPF(t)
	for _, tt := range []struct {
		toolchain string
		env       []string
	}{{"go1.21.13", nil}, {"", nil}, {"", []string{"GOGC=1", "GOMAXPROCS=8"}}, {"go1.27.3", nil}} {
		b := testutil.GoBuild{Toolchain: testutil.GoToolchain(tt.toolchain)}
		t.Run(strings.Join(append([]string{cmp.Or(b.Toolchain, runtime.Version())}, tt.env...), " "), func(t *testing.T) {
			w := startGoscopes(t, b, 1000, 16, tt.env...)
			file := "^" + regexp.QuoteMeta(w.bin) + "$"
			m, recs := openAndRun(t, []Spec{
				{ID: "go.checkout", FileMatch: file, EntrySymbol: "main.(*server).checkout", Return: true},
				{ID: "go.refuse", FileMatch: file, EntrySymbol: "main.(*server).refuse", Return: true},
			})
			st := m.Stats()
			require.Equal(t, 1, st.Refused, "a function without a return instruction")
			require.GreaterOrEqual(t, st.Links, 3, "an entry and at least two returns")
			w.run(t)

			truth := filterMeasured(readMeasured(t, w.out), func(m measured) bool { return m.kind == "checkout" })
			counts := readCounts(t, w.out)
			require.Equal(t, 20, counts["panicked"])
			require.Len(t, truth, 980)
			require.Greater(t, counts["migrated"], 0, "no call resumed on another thread")
			require.Greater(t, counts["moved"], 0, "no call's stack moved inside it")
			require.Eventually(t, func() bool { return len(recs.byProbe(0)) >= len(truth) }, 5*time.Second, 10*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // any extra record
			requireEachInside(t, recs.byProbe(0), truth, w.child.Pid())
			requireRequestLabels(t, recs.byProbe(0), 1000)
			abandoned := m.Stats().Drops[0].Abandoned
			require.LessOrEqual(t, abandoned, uint64(counts["panicked"]))
			require.NotZero(t, abandoned, "a panicked call's goroutine entered again")
			t.Logf("%d records, %d calls resumed on another thread, %d moved their stack, %d panicked, %d scopes abandoned",
				len(truth), counts["migrated"], counts["moved"], counts["panicked"], abandoned)
		})
	}
}

// A C function linked into a Go binary with cgo is probed as in any other
// file: a uretprobe (it runs on the thread's system stack), a thread's
// scope, one record per call; a probe naming it and a Go function at once
// is refused.
func TestCgoFunctionScopes(t *testing.T) {
	testutil.RequireBPF(t)
	w := startGoscopes(t, testutil.GoBuild{Cgo: true}, 200, 4)
	file := "^" + regexp.QuoteMeta(w.bin) + "$"
	m, recs := openAndRun(t, []Spec{
		{ID: "c.work", FileMatch: file, EntrySymbol: "bpfprofiler_c_work", Return: true},
		{ID: "mixed", FileMatch: file, EntrySymbol: "bpfprofiler_c_work", ExitSymbol: "main.(*server).checkout"},
	})
	st := m.Stats()
	require.Equal(t, 1, st.Refused, "Go and C functions in one probe")
	require.Equal(t, 2, st.Links, "an uprobe and a uretprobe")
	w.run(t)
	require.Eventually(t, func() bool { return len(recs.byProbe(0)) >= 200 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // any extra record
	require.Len(t, recs.byProbe(0), 200, "one record per request")
}

// goscopes is the goscopes workload, started and waiting to send its
// requests.
type goscopes struct {
	bin, out string
	child    *testutil.Child
	stdin    io.Writer
}

// startGoscopes builds the goscopes workload as b says and starts it to
// send requests from clients, once run says so.
func startGoscopes(t *testing.T, b testutil.GoBuild, requests, clients int, env ...string) goscopes {
	w := goscopes{bin: filepath.Join(t.TempDir(), "goscopes"), out: filepath.Join(t.TempDir(), "measured.txt")}
	require.NoError(t, testutil.CrossBuildGo(testutil.Workload(t, "goscopes"), w.bin, runtime.GOARCH, b))
	cmd := exec.Command(w.bin, w.out, fmt.Sprint(requests), fmt.Sprint(clients))
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	w.stdin, w.child = stdin, testutil.StartChild(t, cmd)
	require.Equal(t, "READY", w.child.Line(t, testutil.Patient(time.Minute)))
	return w
}

// run sends the requests and waits for the workload to write what it
// measured.
func (w goscopes) run(t *testing.T) {
	_, err := io.WriteString(w.stdin, "go\n")
	require.NoError(t, err)
	require.Equal(t, "DONE", w.child.Line(t, testutil.Patient(2*time.Minute)))
}

// requireEachInside pairs every record with a call the workload measured
// that holds it: calls run concurrently, so each is paired with the
// closest fitting one not taken. At least 99% are at most 1 ms shorter
// than their calls; the rest at most 10 ms: the Go scheduler may run other
// goroutines between the handler's clock read and the call.
func requireEachInside(t *testing.T, recs []capture.RawScope, truth []measured, pid int) {
	t.Helper()
	require.Len(t, recs, len(truth))
	taken := make([]bool, len(truth))
	near := 0
	var worst time.Duration
	for i, r := range recs {
		require.Equal(t, uint32(pid), r.PID)
		best := -1
		for j, m := range truth {
			if taken[j] || r.Start < m.start || r.End > m.end {
				continue
			}
			if best < 0 || m.end-m.start < truth[best].end-truth[best].start {
				best = j
			}
		}
		require.GreaterOrEqual(t, best, 0, "record %d (%v at %d) is inside no call", i, r.Duration(), r.Start)
		taken[best] = true
		diff := time.Duration(truth[best].end-truth[best].start) - r.Duration()
		require.LessOrEqual(t, diff, 10*time.Millisecond, "record %d", i)
		if diff <= time.Millisecond {
			near++
		}
		worst = max(worst, diff)
	}
	require.GreaterOrEqual(t, 100*near, 99*len(recs), "records within 1 ms of their calls")
	t.Logf("%d of %d records within 1 ms of the calls holding them, at most %v shorter", near, len(recs), worst)
}

// readCounts reads the "name n" lines of a workload's output.
func readCounts(t *testing.T, path string) map[string]int {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var name string
		var n int
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			if _, err := fmt.Sscan(sc.Text(), &name, &n); err == nil {
				out[name] = n
			}
		}
	}
	return out
}

// requireRequestLabels requires each record to carry the labels of its own
// call of goscopes' checkout: {request: n}, n distinct, none of a call that
// panicked (every 50th), where the kernel has attach cookies (the labels'
// file is in them); none before.
func requireRequestLabels(t *testing.T, recs []capture.RawScope, requests int) {
	t.Helper()
	seen := map[int]bool{}
	for _, r := range recs {
		if !haveAttachCookies() {
			require.Nil(t, r.GoLabels, "no attach cookies: no labels")
			continue
		}
		require.Len(t, r.GoLabels, 1, "%+v", r)
		n, err := strconv.Atoi(r.GoLabels["request"])
		require.NoError(t, err, "%+v", r.GoLabels)
		require.True(t, n >= 0 && n < requests && n%50 != 49 && !seen[n], "request %d", n)
		seen[n] = true
	}
}
