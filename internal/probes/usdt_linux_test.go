//go:build linux

package probes

import (
	"debug/elf"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// usdtSitesOf returns the sites of each probe of the file at path, by
// "provider:name".
func usdtSitesOf(t *testing.T, path string) map[string][]usdt.Probe {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	probes, err := usdt.Probes(f)
	require.NoError(t, err)
	out := map[string][]usdt.Probe{}
	for _, p := range probes {
		out[p.FullName()] = append(out[p.FullName()], p)
	}
	return out
}

// USDT probes in an executable (semaphores) and in a library it loaded:
// every site attached, the semaphores set only while attached, one record
// per scope with the workload's own duration, a probe the file lacks and
// a Go binary warned about and counted.
func TestUSDTScopes(t *testing.T) {
	testutil.RequireBPF(t)
	w := testutil.StartSDTPair(t)
	sites, libSites := usdtSitesOf(t, w.Bin), usdtSitesOf(t, w.Lib)
	require.Len(t, sites["work:start"], 1)
	require.Len(t, sites["work:done"], 2, "work:done at two sites")
	require.Len(t, libSites["sdtlib:start"], 1)
	require.Len(t, libSites["sdtlib:done"], 1)
	require.Zero(t, libSites["sdtlib:start"][0].Semaphore, "the library's probes have no semaphores")
	semaphores := func() (start, done uint16) {
		return w.Semaphore(t, sites["work:start"][0].Semaphore), w.Semaphore(t, sites["work:done"][0].Semaphore)
	}
	start, done := semaphores()
	require.Zero(t, start)
	require.Zero(t, done)
	for _, s := range w.Round(t)[:3] {
		require.False(t, s.Enabled, "work:start's semaphore set before attach")
	}

	self, err := os.Executable() // this test, a Go binary
	require.NoError(t, err)
	file := func(path string) string { return "^" + regexp.QuoteMeta(path) + "$" }
	specs := []Spec{
		{ID: "work", FileMatch: file(w.Bin), EntryUSDT: "work:start", ExitUSDT: "work:done"},
		{ID: "lib", FileMatch: file(w.Lib), EntryUSDT: "sdtlib:start", ExitUSDT: "sdtlib:done"},
		{ID: "absent", FileMatch: file(w.Bin), EntryUSDT: "work:start", ExitUSDT: "work:nosuch"},
		{ID: "go", FileMatch: file(self), EntryUSDT: "work:start", ExitUSDT: "work:done"},
	}
	core, logs := observer.New(zapcore.WarnLevel)
	m, c := openAndRunWith(t, specs, Options{Logger: zap.New(core)})
	st := m.Stats()
	require.Equal(t, 2, st.Files)
	require.Equal(t, 3+2, st.Links, "work: 1+2 sites, lib: 1+1")
	require.Equal(t, 1, st.Missing)
	require.Equal(t, 1, st.Refused)
	warned := logs.FilterMessage("probe not attached: USDT probe not found in file").All()
	require.Len(t, warned, 1)
	require.Equal(t, "absent", warned[0].ContextMap()["probe"])
	require.Equal(t, w.Bin, warned[0].ContextMap()["file"])
	require.Equal(t, "work:nosuch", warned[0].ContextMap()["usdt_probe"])
	refused := logs.FilterMessage("probe not attached: its USDT probes cannot be used in this file").All()
	require.Len(t, refused, 1)
	require.Equal(t, "go", refused[0].ContextMap()["probe"])
	require.Equal(t, self, refused[0].ContextMap()["file"])
	require.Equal(t, errGoUSDT.Error(), refused[0].ContextMap()["error"])
	start, done = semaphores()
	t.Logf("semaphores while attached: work:start %d, work:done %d", start, done)
	require.Equal(t, uint16(1), start, "one uprobe on work:start's site")
	require.Equal(t, uint16(2), done, "one uprobe on each of work:done's sites")

	truth := w.Round(t)
	require.Eventually(t, func() bool { return len(c.byProbe(0))+len(c.byProbe(1)) >= 6 },
		testutil.Patient(5*time.Second), 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let any unexpected extra record arrive
	requireUSDTMatches(t, "work", c.byProbe(0), truth[:3], w.PID)
	requireUSDTMatches(t, "lib", c.byProbe(1), truth[3:], w.PID)
	require.Empty(t, c.byProbe(2))
	require.Empty(t, c.byProbe(3))
	st = m.Stats()
	require.Equal(t, uint64(6), st.Records)
	require.Zero(t, st.Dropped())

	require.NoError(t, m.Close())
	start, done = semaphores()
	require.Zero(t, start, "work:start's semaphore after Close")
	require.Zero(t, done, "work:done's semaphore after Close")
	for _, s := range w.Round(t)[:3] {
		require.False(t, s.Enabled, "work:start's semaphore set after Close")
	}
}

// requireUSDTMatches checks the records of one USDT probe against the
// workload's scopes: one each, inside the workload's clock reads around
// the probes, at least the sleep's length and within 2 ms of the
// workload's measurement.
func requireUSDTMatches(t *testing.T, name string, recs []capture.RawScope, truth []testutil.SDTScope, pid int) {
	t.Helper()
	require.Len(t, recs, len(truth), "%s: records %+v", name, recs)
	for i, r := range recs {
		s := truth[i]
		want := time.Duration(s.End - s.Start)
		t.Logf("%s[%d]: probe %v, workload %v (sleep %d ms)", name, i, r.Duration(), want, 10*(i+1))
		require.True(t, s.Enabled, "%s[%d] enabled", name, i)
		require.GreaterOrEqual(t, r.Duration(), time.Duration(10*(i+1))*time.Millisecond, "%s[%d] shorter than its sleep", name, i)
		require.LessOrEqual(t, (want - r.Duration()).Abs(), 2*time.Millisecond, "%s[%d]", name, i)
		require.GreaterOrEqual(t, r.Start, s.Start, "%s[%d] starts before the workload's clock read", name, i)
		require.LessOrEqual(t, r.End, s.End, "%s[%d] ends after the workload's clock read", name, i)
		require.Equal(t, uint32(pid), r.PID)
	}
}

// USDT arguments as attributes: work:start's arguments are in a register,
// in memory at a register plus an offset, a constant and a string
// pointer (the test checks the note says so); every record of two
// rounds, with and without an entry stack ahead of the arguments, carries
// exactly the values the workload passed, with attach cookies and
// without (each fetch then has its own copy of the entry program).
func TestUSDTArguments(t *testing.T) {
	testutil.RequireBPF(t)
	w := testutil.StartSDTPair(t)
	site := usdtSitesOf(t, w.Bin)["work:start"][0]
	args, err := usdt.ParseArgs(elfMachine(t, w.Bin), site.ArgSpecs)
	require.NoError(t, err, site.ArgSpecs)
	t.Logf("work:start arguments: %s", site.ArgSpecs)
	kinds := []usdt.ArgKind{usdt.ArgRegister, usdt.ArgMemory, usdt.ArgConst, usdt.ArgRegister}
	require.Len(t, args, len(kinds))
	for i, a := range args {
		require.Equal(t, kinds[i], a.Kind, "argument %d %+v", i, a)
	}

	file := "^" + regexp.QuoteMeta(w.Bin) + "$"
	attrs := map[string]string{"ms": "arg0", "weight": "arg1", "answer": "arg2", "name": "str(arg3)"}
	specs := []Spec{
		{ID: "plain", FileMatch: file, EntryUSDT: "work:start", ExitUSDT: "work:done", Attributes: attrs},
		{ID: "stacks", FileMatch: file, EntryUSDT: "work:start", ExitUSDT: "work:done", Attributes: attrs, EntryStack: true},
	}
	// Slots in the attributes' names' order: answer, ms, name, weight.
	want := func(ms int) []capture.ProbeArg {
		return []capture.ProbeArg{{Int: 42}, {Int: int64(ms)}, {Int: int64(len(fmt.Sprintf("work-%d", ms)) + 1), Str: fmt.Sprintf("work-%d", ms)}, {Int: int64(-3 * ms)}}
	}
	for _, cookies := range []bool{true, false} {
		t.Run(fmt.Sprintf("cookies=%v", cookies), func(t *testing.T) {
			if cookies && !haveAttachCookies() {
				t.Skip("the kernel has no attach cookies (Linux 5.15)")
			}
			saved := haveAttachCookies
			haveAttachCookies = func() bool { return cookies }
			t.Cleanup(func() { haveAttachCookies = saved })
			m, c := openAndRun(t, specs)
			require.Equal(t, 1+2+1+2, m.Stats().Links)
			require.Zero(t, m.Stats().Refused)
			w.Round(t)
			w.Round(t)
			require.Eventually(t, func() bool { return len(c.byProbe(0)) >= 6 && len(c.byProbe(1)) >= 6 },
				testutil.Patient(5*time.Second), 5*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // let any unexpected extra record arrive
			for probe := range specs {
				recs := c.byProbe(probe)
				require.Len(t, recs, 6, specs[probe].ID)
				for i, r := range recs {
					ms := 10 * (i%3 + 1)
					require.GreaterOrEqual(t, r.Duration(), time.Duration(ms)*time.Millisecond)
					require.Equal(t, want(ms), r.Args, "%s[%d]", specs[probe].ID, i)
					if specs[probe].EntryStack {
						require.NotEmpty(t, r.EntryStack, "%s[%d]", specs[probe].ID, i)
					}
				}
			}
			require.Zero(t, m.Stats().Malformed)
			require.NoError(t, m.Close())
		})
	}
}

// elfMachine is the machine of the ELF file at path.
func elfMachine(t *testing.T, path string) elf.Machine {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return f.Machine
}
