//go:build linux

package probes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A probe whose attach failed (as it does without the needed capability) is
// warned about once, not tried again by the scans of the process's exec,
// tried again at each rescan, and attached by the first rescan at which the
// kernel accepts it: its records then flow.
func TestFailedAttachRetriedAtRescan(t *testing.T) {
	testutil.RequireBPF(t)
	bin := testutil.BuildC(t, "scopes.c")
	file := "^" + regexp.QuoteMeta(bin) + "$"
	// One scan per exec: the later ones would race with the scans below.
	delays := execScanDelays
	execScanDelays = execScanDelays[:1]
	t.Cleanup(func() { execScanDelays = delays })
	core, logs := observer.New(zapcore.DebugLevel)
	m, err := Open([]Spec{
		{ID: "timed", FileMatch: file, EntrySymbol: "timed_scope", Return: true},
		{ID: "missing", FileMatch: file, EntrySymbol: "no_such_function", Return: true},
	}, Options{Logger: zap.New(core), RescanInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	t.Cleanup(func() { // what the attacher said, to tell a refused read from a skipped scan
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("%s %s %v", e.Level, e.Message, e.ContextMap())
			}
		}
	})
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, c.add) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	// The kernel refuses every attach until allowed is set.
	var allowed atomic.Bool
	var calls atomic.Int32
	m.att.mu.Lock()
	realAttach := m.att.attachFile
	m.att.attachFile = func(path string, probe int, entry, exit []symOffset, goroutine bool, labels uint64) ([]link.Link, error) {
		calls.Add(1)
		if !allowed.Load() {
			return nil, fmt.Errorf("attach exit timed_scope: opening perf event: %w", syscall.EACCES)
		}
		return realAttach(path, probe, entry, exit, goroutine, labels)
	}
	m.att.mu.Unlock()

	out := filepath.Join(t.TempDir(), "measured.txt")
	cmd := exec.Command("chrt", realtime(bin, out, "stdin")...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	testutil.StartChild(t, cmd)
	pid := uint32(cmd.Process.Pid)
	require.Eventually(t, func() bool {
		p, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe"))
		return p == bin
	}, 5*time.Second, 10*time.Millisecond)

	// The exec event's first scan fails; its later scans do not try again.
	require.Eventually(t, func() bool { return m.Stats().Failed == 1 }, 5*time.Second, 5*time.Millisecond)
	for range 3 {
		require.True(t, m.att.scanPID(pid))
	}
	assert.Equal(t, int32(1), calls.Load(), "attach tried before the next rescan")
	st := m.Stats()
	assert.Equal(t, 1, st.Missing, "a missing symbol is final")
	assert.Zero(t, st.Links)

	// A rescan tries again, still refused: no second warning.
	m.att.scanAll()
	assert.Equal(t, int32(2), calls.Load())
	assert.Equal(t, 1, m.Stats().Failed)

	// A scan that finds another opening the file leaves the file to it.
	opening, release, released := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		_, _ = procfs.Within(m.att.deadline, m.att.proc.RootPath(pid, bin), func() (struct{}, error) {
			close(opening)
			<-release
			return struct{}{}, nil
		}, nil)
	}()
	<-opening
	m.att.scanAll()
	close(release)
	<-released
	assert.Equal(t, int32(2), calls.Load(), "attach tried while another scan opened the file")
	assert.Equal(t, 1, m.Stats().Failed)

	allowed.Store(true)
	m.att.scanAll()
	st = m.Stats()
	assert.Equal(t, int32(3), calls.Load())
	assert.Equal(t, 2, st.Links, "timed_scope entry + uretprobe")
	assert.Zero(t, st.Failed)
	assert.Equal(t, 1, st.Missing, "the missing symbol was not looked up again")
	m.att.scanAll()
	assert.Equal(t, int32(3), calls.Load(), "attached: never again")

	warnings := logs.FilterMessageSnippet("cannot attach probe").FilterLevelExact(zapcore.WarnLevel).All()
	require.Len(t, warnings, 1, "one warning per (probe, file)")
	assert.Equal(t, "timed", warnings[0].ContextMap()["probe"])
	assert.Contains(t, warnings[0].ContextMap()["error"], "permission denied")
	assert.Len(t, logs.FilterMessageSnippet("cannot attach probe").FilterLevelExact(zapcore.DebugLevel).All(), 1,
		"later failures at debug level")

	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	// scopes.c runs timed_scope 10 times on its main thread and twice on a worker.
	require.Eventually(t, func() bool { return len(c.byProbe(0)) == 12 }, 20*time.Second, 20*time.Millisecond,
		"records of the probe attached at the rescan")
}
