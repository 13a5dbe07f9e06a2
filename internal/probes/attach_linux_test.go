//go:build linux

package probes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// The attacher's retry decision, without a kernel: the attach itself is
// replaced by results the kernel gives.
func TestAttacherRetryDecision(t *testing.T) {
	bin := testutil.BuildC(t, "scopes.c")
	cmd := exec.Command(bin, filepath.Join(t.TempDir(), "measured"), "stdin")
	_, err := cmd.StdinPipe() // scopes waits for a line
	require.NoError(t, err)
	testutil.StartChild(t, cmd)
	require.Eventually(t, func() bool {
		p, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe"))
		return p == bin
	}, 5*time.Second, 10*time.Millisecond)

	core, logs := observer.New(zapcore.DebugLevel)
	a := newAttacher(procfs.FS{Root: "/proc"}, zap.New(core), []compiledSpec{compileSpec(Spec{
		ID: "timed", FileMatch: "^" + regexp.QuoteMeta(bin) + "$", EntrySymbol: "timed_scope", Return: true,
	})}, nil)
	var results []error // what each attach returns, in turn
	calls := 0
	a.attachFile = func(string, int, []symOffset, []symOffset, bool, uint64) ([]link.Link, error) {
		err := results[calls]
		calls++
		return nil, err
	}
	pid := uint32(cmd.Process.Pid)
	warnings := func() int { return logs.FilterLevelExact(zapcore.WarnLevel).Len() }

	// The process went away while attaching: the next scan tries again, no warning.
	results = append(results, fmt.Errorf("creating perf_uprobe PMU: token: not found: %w", syscall.ENOENT))
	require.True(t, a.scanPID(pid))
	assert.Equal(t, 1, calls)
	assert.Zero(t, warnings())

	// Refused: warned, and not tried again before the next rescan.
	results = append(results, fmt.Errorf("opening perf event: %w", syscall.EACCES))
	a.scanPID(pid)
	assert.Equal(t, 2, calls)
	require.Equal(t, 1, warnings())
	assert.Contains(t, logs.FilterLevelExact(zapcore.WarnLevel).All()[0].ContextMap()["error"], "permission denied")
	a.scanPID(pid)
	assert.Equal(t, 2, calls, "an exec scan before the rescan")
	var st Stats
	a.stats(&st)
	assert.Equal(t, 1, st.Failed)

	// Rescans try again; a second refusal is not warned about again.
	results = append(results, fmt.Errorf("opening perf event: %w", syscall.EPERM), nil)
	a.scanAll()
	assert.Equal(t, 3, calls)
	assert.Equal(t, 1, warnings())
	a.scanAll()
	assert.Equal(t, 4, calls, "attached at the second rescan")
	a.scanAll()
	a.scanPID(pid)
	assert.Equal(t, 4, calls, "attached: never again")
	st = Stats{}
	a.stats(&st)
	assert.Zero(t, st.Failed)
}
