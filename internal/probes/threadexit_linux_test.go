//go:build linux

package probes

import (
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// scopeKey and scopeState mirror struct scope_key and struct scope_state of
// bpf/probe.bpf.c.
type scopeKey struct {
	TID, ProbeIndex uint32
	Goroutine       uint64
}

type scopeState struct {
	StartNs    uint64
	Depth, Pad uint32
	StackDepth uint64
}

// threadScopes returns the depth of every scope state the BPF side keeps
// for tid (host thread id), by probe index.
func (m *Manager) threadScopes(tid uint32) (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	var k scopeKey
	var v scopeState
	it := m.objs.Scopes.Iterate()
	for it.Next(&k, &v) {
		if k.TID == tid && k.Goroutine == 0 {
			out[k.ProbeIndex] = v.Depth
		}
	}
	return out, it.Err()
}

// A thread that exits inside a scope leaves no state behind, and a later
// thread's scope yields exactly one correct record.
func TestThreadExitInsideScope(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "threadexit.c")
	cmd := exec.Command("chrt", realtime(bin)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	child := testutil.StartChild(t, cmd)
	next := func(prefix string) []string {
		t.Helper()
		line := child.Line(t, testutil.Patient(time.Minute))
		f := strings.Fields(line)
		require.NotEmpty(t, f)
		require.Equal(t, prefix, f[0], "workload said %q", line)
		return f[1:]
	}
	send := func() {
		t.Helper()
		_, err := io.WriteString(stdin, "next\n")
		require.NoError(t, err)
	}

	file := "^" + regexp.QuoteMeta(bin) + "$"
	m, c := openAndRun(t, []Spec{{ID: "pair", FileMatch: file, EntrySymbol: "scope_begin", ExitSymbol: "scope_end"}})
	require.Equal(t, 2, m.Stats().Links)

	send()
	tid64, err := strconv.ParseUint(next("inside")[0], 10, 32)
	require.NoError(t, err)
	tid := uint32(tid64)
	scopes, err := m.threadScopes(tid)
	require.NoError(t, err)
	require.Equal(t, map[uint32]uint32{0: 1}, scopes, "the open scope's state")

	send()
	next("exited")
	// The joiner wakes in exit_mm, before the sched_process_exit
	// tracepoint runs: wait a little for the state to go.
	require.Eventually(t, func() bool {
		s, err := m.threadScopes(tid)
		return err == nil && len(s) == 0
	}, 2*time.Second, 5*time.Millisecond, "scope state of exited thread %d left behind", tid)

	send()
	f := next("pair")
	require.Len(t, f, 3)
	pairTID, _ := strconv.ParseUint(f[0], 10, 32)
	start, _ := strconv.ParseUint(f[1], 10, 64)
	end, _ := strconv.ParseUint(f[2], 10, 64)
	next("done")
	require.NoError(t, child.Wait(t, testutil.Patient(time.Minute)))

	require.Eventually(t, func() bool { return len(c.byProbe(0)) >= 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let any unexpected extra record arrive
	requireMatches(t, "pair", c.byProbe(0), []measured{{"pair", uint32(pairTID), start, end}}, cmd.Process.Pid, "threadexit")
	st := m.Stats()
	require.Equal(t, uint64(1), st.Records)
	require.Zero(t, st.Dropped())
}
