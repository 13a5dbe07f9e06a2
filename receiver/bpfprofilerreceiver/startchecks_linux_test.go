//go:build linux

package bpfprofilerreceiver

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// /proc is a directory no one, root included, can create files in.
func TestStartFailsOnUnwritablePprofDirectory(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Pprof.Directory = "/proc"
	src := &fakeSource{}
	rcv, _ := newObservedReceiver(t, cfg, src)
	err := rcv.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, `pprof::directory: cannot write files in "/proc"`)
	assert.False(t, src.closed || src.drains > 0, "no source opened")
}

// A warning names the target pids once all of them have exited, not before;
// the receiver keeps reporting.
func TestWarnsOnceWhenEveryTargetExited(t *testing.T) {
	first, second := startSleep(t), startSleep(t)
	cfg := createDefaultConfig().(*Config)
	cfg.ReportInterval = 100 * time.Millisecond
	cfg.Targets.PIDs = []uint32{uint32(second.Pid()), uint32(first.Pid())}
	src := &fakeSource{}
	rcv, logs := newObservedReceiver(t, cfg, src)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	gone := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("every process of targets::pids has exited").FilterLevelExact(zapcore.WarnLevel).All()
	}
	drains := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.drains
	}
	waitReports := func(n int) {
		t.Helper()
		after := drains()
		require.Eventually(t, func() bool { return drains() >= after+n }, 10*time.Second, 10*time.Millisecond)
	}

	stop(first)
	waitReports(3)
	require.Empty(t, gone(), "one target is alive")

	stop(second)
	require.Eventually(t, func() bool { return len(gone()) > 0 }, 10*time.Second, 10*time.Millisecond)
	waitReports(3)
	warned := gone()
	require.Len(t, warned, 1, "warned once")
	assert.Equal(t, []any{uint32(first.Pid()), uint32(second.Pid())}, warned[0].ContextMap()["targets::pids"])
}

func startSleep(t *testing.T) *testutil.Child {
	t.Helper()
	return testutil.StartChild(t, exec.Command("sleep", "60"))
}

// stop kills c and reaps it, so that its /proc entry is gone.
func stop(c *testutil.Child) {
	_ = c.Kill(testutil.Patient(30 * time.Second))
}
