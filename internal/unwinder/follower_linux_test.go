//go:build linux

package unwinder

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A process announced and exited within loadDelay is never loaded; one that
// lives longer is, after loadDelay; a rescan loads at once, and one that
// finds nothing new holds the next back; every announcement is handed on
// at once.
func TestFollowerDefersLoads(t *testing.T) {
	testutil.RequireBPF(t)
	tables, err := OpenTables(procfs.FS{Root: "/proc"}, 1<<20)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tables.Close()) })
	in := make(chan capture.ProcessEvent)
	f := tables.Follow(in)
	defer func() { close(in); f.Wait() }()
	self := uint32(os.Getpid())
	send := func(ev capture.ProcessEvent) {
		t.Helper()
		in <- ev
		select {
		case got := <-f.Events():
			require.Equal(t, ev, got)
		case <-time.After(time.Second):
			t.Fatalf("%+v not handed on", ev)
		}
	}

	send(capture.ProcessEvent{PID: self})
	send(capture.ProcessEvent{PID: self, Exit: true})
	time.Sleep(2 * loadDelay)
	st := tables.Stats()
	assert.Equal(t, uint64(1), st.SkippedLoads)
	assert.Zero(t, st.Processes, "exited before its load was due")

	send(capture.ProcessEvent{PID: self})
	assert.Zero(t, tables.Stats().Processes, "not before loadDelay")
	require.Eventually(t, func() bool { return tables.Stats().Processes == 1 }, time.Second, 5*time.Millisecond)
	send(capture.ProcessEvent{PID: self, Exec: true})
	require.Eventually(t, func() bool { return tables.Stats().Processes == 0 }, time.Second, 5*time.Millisecond)

	send(capture.ProcessEvent{PID: self})
	send(capture.ProcessEvent{PID: self, Rescan: true})
	require.Eventually(t, func() bool { return tables.Stats().Processes == 1 }, loadDelay/2, time.Millisecond,
		"a rescan loads at once")
	assert.Equal(t, uint64(1), tables.Stats().SkippedLoads)

	// A rescan that finds nothing new holds the next ones back, until the
	// process execs.
	send(capture.ProcessEvent{PID: self, Rescan: true})
	send(capture.ProcessEvent{PID: self, Rescan: true})
	st = tables.Stats()
	assert.Equal(t, uint64(2), st.Rescans, "the loading one and the fruitless one")
	assert.Equal(t, uint64(1), st.RescansHeldBack)
	send(capture.ProcessEvent{PID: self, Exec: true})
	send(capture.ProcessEvent{PID: self, Rescan: true})
	st = tables.Stats()
	assert.Equal(t, uint64(3), st.Rescans, "not held back after an exec")
	assert.Equal(t, uint64(1), st.RescansHeldBack)
}

// The process gauges of each runtime land in that runtime's field: a
// process loaded with runtime name counts there and nowhere else.
func TestFollowerRuntimeProcesses(t *testing.T) {
	testutil.RequireBPF(t)
	tables, err := OpenTables(procfs.FS{Root: "/proc"}, 1<<20)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tables.Close()) })
	in := make(chan capture.ProcessEvent)
	f := tables.Follow(in)
	defer func() { close(in); f.Wait() }()
	gauges := func(st capture.Stats) map[capture.Runtime]uint64 {
		return map[capture.Runtime]uint64{capture.CPython: st.PythonProcesses, capture.HotSpot: st.JVMProcesses,
			capture.V8: st.V8Processes, capture.Ruby: st.RubyProcesses, capture.PHP: st.PHPProcesses}
	}
	for _, rt := range []capture.Runtime{capture.CPython, capture.HotSpot, capture.V8, capture.Ruby, capture.PHP} {
		t.Run(rt.Name(), func(t *testing.T) {
			const pid = 1 << 30 // no real process: only counted, never loaded
			l := tables.loader
			l.mu.Lock()
			l.procs[pid] = &loadedProcess{runtimes: []*runtimes.Runtime{{Name: rt.Name()}}, versions: []string{""}}
			l.mu.Unlock()
			defer func() { l.mu.Lock(); delete(l.procs, pid); l.mu.Unlock() }()
			var st capture.Stats
			f.AddStats(&st)
			want := map[capture.Runtime]uint64{capture.CPython: 0, capture.HotSpot: 0, capture.V8: 0, capture.Ruby: 0, capture.PHP: 0}
			want[rt] = 1
			assert.Equal(t, want, gauges(st))
		})
	}
}
