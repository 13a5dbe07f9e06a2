//go:build linux

package probes

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// buildUSDT compiles testdata/workloads/usdt/<src> into dir as out.
func buildUSDT(t *testing.T, dir, src, out string) string {
	t.Helper()
	bin := filepath.Join(dir, out)
	require.NoError(t, testutil.CompileC(testutil.Workload(t, filepath.Join("usdt", src)), bin))
	return bin
}

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

// semaphore reads the 16-bit semaphore at link-time address addr of a file
// loaded at bias in process pid.
func semaphore(t *testing.T, pid int, bias, addr uint64) uint16 {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	var b [2]byte
	_, err = mem.ReadAt(b[:], int64(bias+addr))
	require.NoError(t, err)
	return binary.NativeEndian.Uint16(b[:])
}

// sdtWorkload drives the sdtpair workload round by round.
type sdtWorkload struct {
	t     *testing.T
	in    interface{ Write([]byte) (int, error) }
	out   string
	round int
}

// run runs one round and returns its lines.
func (w *sdtWorkload) run() []measuredUSDT {
	w.t.Helper()
	w.round++
	_, err := w.in.Write([]byte("round\n"))
	require.NoError(w.t, err)
	done := fmt.Sprintf("round %d done", w.round)
	var text string
	require.Eventually(w.t, func() bool {
		b, _ := os.ReadFile(w.out)
		text = string(b)
		return strings.Contains(text, done)
	}, testutil.Patient(10*time.Second), 5*time.Millisecond)
	after := "ready"
	if w.round > 1 {
		after = fmt.Sprintf("round %d done", w.round-1)
	}
	_, text, _ = strings.Cut(text, after)
	text, _, _ = strings.Cut(text, done)
	var out []measuredUSDT
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var m measuredUSDT
		_, err := fmt.Sscan(line, &m.kind, &m.enabled, &m.start, &m.end)
		require.NoError(w.t, err, "line %q", line)
		out = append(out, m)
	}
	require.Len(w.t, out, 6, "round %d: %q", w.round, text)
	return out
}

// measuredUSDT is one line of the sdtpair workload's output.
type measuredUSDT struct {
	kind       string
	enabled    int
	start, end uint64
}

// USDT probes in an executable (semaphores) and in a library it loaded:
// every site attached, the semaphores set only while attached, one record
// per scope with the workload's own duration, a probe the file lacks
// warned about and counted.
func TestUSDTScopes(t *testing.T) {
	testutil.RequireBPF(t)
	dir := t.TempDir()
	bin := buildUSDT(t, dir, "sdtpair.c", "sdtpair")
	lib := buildUSDT(t, dir, "sdtlib.c", "libsdtlib.so")
	out := filepath.Join(dir, "measured.txt")
	cmd := exec.Command("chrt", realtime(bin, lib, out)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	testutil.StartChild(t, cmd)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(out)
		return strings.HasPrefix(string(b), "ready")
	}, testutil.Patient(5*time.Second), 5*time.Millisecond)
	pid := cmd.Process.Pid
	w := &sdtWorkload{t: t, in: stdin, out: out}

	sites, libSites := usdtSitesOf(t, bin), usdtSitesOf(t, lib)
	require.Len(t, sites["work:start"], 1)
	require.Len(t, sites["work:done"], 2, "work:done at two sites")
	require.Len(t, libSites["sdtlib:start"], 1)
	require.Len(t, libSites["sdtlib:done"], 1)
	require.Zero(t, libSites["sdtlib:start"][0].Semaphore, "the library's probes have no semaphores")
	bias := testutil.LoadBias(t, pid, bin)
	semaphores := func() (start, done uint16) {
		return semaphore(t, pid, bias, sites["work:start"][0].Semaphore), semaphore(t, pid, bias, sites["work:done"][0].Semaphore)
	}
	start, done := semaphores()
	require.Zero(t, start)
	require.Zero(t, done)
	for _, m := range w.run()[:3] {
		require.Zero(t, m.enabled, "work:start's semaphore set before attach")
	}

	self, err := os.Executable() // this test, a Go binary
	require.NoError(t, err)
	file := func(path string) string { return "^" + regexp.QuoteMeta(path) + "$" }
	specs := []Spec{
		{ID: "work", FileMatch: file(bin), EntryUSDT: "work:start", ExitUSDT: "work:done"},
		{ID: "lib", FileMatch: file(lib), EntryUSDT: "sdtlib:start", ExitUSDT: "sdtlib:done"},
		{ID: "absent", FileMatch: file(bin), EntryUSDT: "work:start", ExitUSDT: "work:nosuch"},
		{ID: "go", FileMatch: file(self), EntryUSDT: "work:start", ExitUSDT: "work:done"},
	}
	core, logs := observer.New(zapcore.WarnLevel)
	m, c := openAndRunObserved(t, specs, zap.New(core))
	st := m.Stats()
	require.Equal(t, 2, st.Files)
	require.Equal(t, 3+2, st.Links, "work: 1+2 sites, lib: 1+1")
	require.Equal(t, 1, st.Missing)
	require.Equal(t, 1, st.Refused)
	warned := logs.FilterMessage("probe not attached: USDT probe not found in file").All()
	require.Len(t, warned, 1)
	require.Equal(t, "absent", warned[0].ContextMap()["probe"])
	require.Equal(t, bin, warned[0].ContextMap()["file"])
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

	truth := w.run()
	require.Eventually(t, func() bool { return len(c.byProbe(0))+len(c.byProbe(1)) >= 6 },
		testutil.Patient(5*time.Second), 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let any unexpected extra record arrive
	requireUSDTMatches(t, "work", c.byProbe(0), truth[:3], pid)
	requireUSDTMatches(t, "lib", c.byProbe(1), truth[3:], pid)
	require.Empty(t, c.byProbe(2))
	require.Empty(t, c.byProbe(3))
	st = m.Stats()
	require.Equal(t, uint64(6), st.Records)
	require.Zero(t, st.Dropped())

	require.NoError(t, m.Close())
	start, done = semaphores()
	require.Zero(t, start, "work:start's semaphore after Close")
	require.Zero(t, done, "work:done's semaphore after Close")
	for _, m := range w.run()[:3] {
		require.Zero(t, m.enabled, "work:start's semaphore set after Close")
	}
}

// requireUSDTMatches checks the records of one USDT probe against the
// workload's lines: one each, inside the workload's clock reads around
// the probes, at least the sleep's length and within 2 ms of the
// workload's measurement.
func requireUSDTMatches(t *testing.T, name string, recs []capture.RawScope, truth []measuredUSDT, pid int) {
	t.Helper()
	require.Len(t, recs, len(truth), "%s: records %+v", name, recs)
	for i, r := range recs {
		m := truth[i]
		want := time.Duration(m.end - m.start)
		t.Logf("%s[%d]: probe %v, workload %v (nominal %d ms)", name, i, r.Duration(), want, 10*(i+1))
		require.Equal(t, 1, m.enabled, "%s[%d] enabled", name, i)
		require.GreaterOrEqual(t, r.Duration(), time.Duration(10*(i+1))*time.Millisecond, "%s[%d] shorter than its sleep", name, i)
		require.LessOrEqual(t, (want - r.Duration()).Abs(), 2*time.Millisecond, "%s[%d]", name, i)
		require.GreaterOrEqual(t, r.Start, m.start, "%s[%d] starts before the workload's clock read", name, i)
		require.LessOrEqual(t, r.End, m.end, "%s[%d] ends after the workload's clock read", name, i)
		require.Equal(t, uint32(pid), r.PID)
	}
}

// openAndRunObserved is openAndRun logging to log.
func openAndRunObserved(t *testing.T, specs []Spec, log *zap.Logger) (*Manager, *collector) {
	t.Helper()
	m, err := Open(specs, Options{Logger: log, RescanInterval: -1})
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
