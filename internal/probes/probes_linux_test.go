//go:build linux

package probes

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// collector gathers what Run delivers.
type collector struct {
	mu   sync.Mutex
	recs []capture.RawScope
}

func (c *collector) add(rs []capture.RawScope) {
	c.mu.Lock()
	c.recs = append(c.recs, rs...)
	c.mu.Unlock()
}

func (c *collector) byProbe(i int) []capture.RawScope {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []capture.RawScope
	for _, r := range c.recs {
		if r.ProbeIndex == i {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Start < out[b].Start })
	return out
}

func openAndRun(t *testing.T, specs []Spec) (*Manager, *collector) {
	t.Helper()
	return openAndRunWith(t, specs, Options{})
}

// openAndRunWith is openAndRun with opts (RescanInterval is set here, and
// Logger, unless set, to the test's).
func openAndRunWith(t *testing.T, specs []Spec, opts Options) (*Manager, *collector) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	opts.RescanInterval = -1
	m, err := Open(specs, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, c.add) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return m, c
}

// measured is one line of the scopes workload's output.
type measured struct {
	kind       string
	tid        uint32
	start, end uint64
}

func readMeasured(t *testing.T, path string) []measured {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []measured
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			continue
		}
		tid, _ := strconv.ParseUint(fs[1], 10, 32)
		s, _ := strconv.ParseUint(fs[2], 10, 64)
		e, _ := strconv.ParseUint(fs[3], 10, 64)
		out = append(out, measured{fs[0], uint32(tid), s, e})
	}
	return out
}

func filterMeasured(ms []measured, keep func(measured) bool) []measured {
	var out []measured
	for _, m := range ms {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// requireMatches checks that every record lies inside the workload's own
// measurement of the same call, and that its duration is within ±1% or
// ±100 µs of it for at least 90% of the records and within ±5% or ±1 ms for
// every one: the thread may be preempted between the probe and the
// workload's own clock reads (218 µs seen on a loaded 2-CPU machine).
func requireMatches(t *testing.T, name string, recs []capture.RawScope, truth []measured, pid int, comm string) {
	t.Helper()
	require.Len(t, recs, len(truth), "%s: records %+v", name, recs)
	tight := 0
	for i, r := range recs {
		m := truth[i]
		want := time.Duration(m.end - m.start)
		diff := (want - r.Duration()).Abs()
		t.Logf("%s[%d]: tid %d probe %v workload %v diff %v", name, i, r.TID, r.Duration(), want, diff)
		if diff <= max(want/100, 100*time.Microsecond) {
			tight++
		}
		require.LessOrEqual(t, diff, max(want/20, time.Millisecond), "%s[%d]", name, i)
		require.GreaterOrEqual(t, r.Start, m.start, "%s[%d] starts before the call", name, i)
		require.LessOrEqual(t, r.End, m.end, "%s[%d] ends after the call", name, i)
		require.Equal(t, uint32(pid), r.PID)
		require.Equal(t, m.tid, r.TID)
		require.Equal(t, comm, r.Comm)
	}
	require.GreaterOrEqual(t, 10*tight, 9*len(recs), "%s: %d of %d records within 1%% or 100 µs of the workload's measurement", name, tight, len(recs))
}

func scopeSpecs(bin string) []Spec {
	file := "^" + regexp.QuoteMeta(bin) + "$"
	return []Spec{
		{ID: "timed", FileMatch: file, EntrySymbol: "timed_scope", Return: true},
		{ID: "timed.main.min", FileMatch: file, EntrySymbol: "timed_scope", Return: true, MainThreadOnly: true, MinDuration: 10 * time.Millisecond},
		{ID: "nested", FileMatch: file, EntrySymbol: "nested_scope", Return: true},
		{ID: "pair", FileMatch: file, EntrySymbol: "scope_begin", ExitSymbol: "scope_end"},
		{ID: "missing", FileMatch: file, EntrySymbol: "no_such_function", Return: true},
	}
}

// checkScopes matches the records of each probe with what the workload
// measured, and returns how many records that is in all.
func checkScopes(t *testing.T, c *collector, out string, pid int) int {
	t.Helper()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "done")
	}, 20*time.Second, 20*time.Millisecond)
	truth := readMeasured(t, out)
	timed := filterMeasured(truth, func(m measured) bool { return m.kind == "timed" || m.kind == "worker" })
	mainMin := filterMeasured(truth, func(m measured) bool {
		return m.kind == "timed" && m.end-m.start >= uint64(10*time.Millisecond)
	})
	nested := filterMeasured(truth, func(m measured) bool { return m.kind == "nested" })
	pair := filterMeasured(truth, func(m measured) bool { return m.kind == "pair" })
	require.Len(t, timed, 12)
	// Five of MAIN_MS are at least 10 ms; a short one delayed past it on a
	// loaded host (8 ms measured 19.5) adds one: the probe must follow.
	require.GreaterOrEqual(t, len(mainMin), 5)

	require.Eventually(t, func() bool { return len(c.byProbe(3)) >= 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let any unexpected extra record arrive
	requireMatches(t, "timed", c.byProbe(0), timed, pid, "scopes")
	requireMatches(t, "timed.main.min", c.byProbe(1), mainMin, pid, "scopes")
	requireMatches(t, "nested", c.byProbe(2), nested, pid, "scopes")
	requireMatches(t, "pair", c.byProbe(3), pair, pid, "scopes")
	require.Empty(t, c.byProbe(4))
	return len(timed) + len(mainMin) + len(nested) + len(pair)
}

// uprobesOf counts the uprobe links of the programs ids (any process). The
// kernel reports the path a uprobe was opened by: the attacher opens the
// probed file through its descriptor (/proc/self/fd/<n>), never by the path
// a process shows, and each uprobe must say so.
func uprobesOf(t *testing.T, ids []ebpf.ProgramID) int {
	t.Helper()
	n := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || !slices.Contains(ids, info.Program) {
			continue // detached meanwhile, or not ours
		}
		if pe := info.PerfEvent(); pe != nil {
			if u := pe.Uprobe(); u != nil {
				assert.True(t, strings.HasPrefix(u.File, "/proc/self/fd/"), "uprobe opened by %q, not by descriptor", u.File)
				n++
			}
		}
	}
	require.NoError(t, it.Err())
	return n
}

// programIDs returns the kernel ids of the Manager's probe programs.
func programIDs(t *testing.T, m *Manager) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{m.objs.ProbeEntry, m.objs.ProbeExit, m.objs.ProbeExec, m.objs.ProbeThreadExit} {
		info, err := p.Info()
		require.NoError(t, err)
		id, ok := info.ID()
		require.True(t, ok, "program id")
		ids = append(ids, id)
	}
	return ids
}

// programsGone reports whether no program of ids is loaded any more.
func programsGone(ids []ebpf.ProgramID) bool {
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err == nil {
			_ = p.Close()
			return false
		}
	}
	return true
}

// realtime returns chrt arguments running cmd with SCHED_FIFO: the workload
// compares its own clock reads around each call with the probe's, and a
// preemption between them (other tests share the 2 CPUs) is not what is
// measured here.
func realtime(cmd ...string) []string { return append([]string{"-f", "10"}, cmd...) }

// A process running at Open: every semantic of the BPF side, then Close
// leaves no uprobe behind.
func TestScopesRunningProcess(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "scopes.c")
	out := filepath.Join(t.TempDir(), "measured.txt")
	cmd := exec.Command("chrt", realtime(bin, out, "stdin")...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	testutil.StartChild(t, cmd)
	// Wait until the executable is mapped (it is from exec on).
	require.Eventually(t, func() bool {
		p, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe"))
		return p == bin
	}, 5*time.Second, 10*time.Millisecond)

	m, c := openAndRun(t, scopeSpecs(bin))
	st := m.Stats()
	require.Equal(t, 1, st.Files)
	// timed: entry+uretprobe, timed.main.min: 2, nested: 2, pair: 2.
	require.Equal(t, 8, st.Links)
	require.Equal(t, 1, st.Missing)
	ids := programIDs(t, m)
	require.Equal(t, 8, uprobesOf(t, ids))

	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	records := checkScopes(t, c, out, cmd.Process.Pid)
	st = m.Stats()
	require.Equal(t, uint64(records), st.Records, "12 timed, 5 or 6 timed.main.min (see checkScopes), 1 nested, 1 pair")
	require.Zero(t, st.Dropped())

	require.NoError(t, m.Close())
	require.NoError(t, m.Close()) // idempotent
	require.Zero(t, uprobesOf(t, ids))
	require.Eventually(t, func() bool { return programsGone(ids) }, 5*time.Second, 10*time.Millisecond,
		"probe programs %v still loaded after Close", ids)
}

// A process started after Open is found through its exec event.
func TestScopesExecedProcess(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "scopes.c")
	out := filepath.Join(t.TempDir(), "measured.txt")
	m, c := openAndRun(t, scopeSpecs(bin))
	require.Zero(t, m.Stats().Links)

	cmd := testutil.StartWorkload(t, "chrt", realtime(bin, out, "150")...)
	require.Eventually(t, func() bool { return m.Stats().Links == 8 }, 2*time.Second, 5*time.Millisecond)
	checkScopes(t, c, out, cmd.Process.Pid)
}

// Without attach cookies (kernels before 5.15) each probe has its own copy
// of the programs; every record still reaches its own probe.
func TestScopesWithoutAttachCookies(t *testing.T) {
	testutil.RequireBPF(t)
	saved := haveAttachCookies
	haveAttachCookies = func() bool { return false }
	t.Cleanup(func() { haveAttachCookies = saved })
	bin := testutil.BuildC(t, "scopes.c")
	out := filepath.Join(t.TempDir(), "measured.txt")
	m, c := openAndRun(t, scopeSpecs(bin))
	require.Len(t, m.perProbe, len(scopeSpecs(bin)))
	cmd := testutil.StartWorkload(t, "chrt", realtime(bin, out, "150")...)
	require.Eventually(t, func() bool { return m.Stats().Links == 8 }, 2*time.Second, 5*time.Millisecond)
	checkScopes(t, c, out, cmd.Process.Pid)
}
