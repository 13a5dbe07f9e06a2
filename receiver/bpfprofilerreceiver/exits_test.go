package bpfprofilerreceiver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

func TestExitQueue(t *testing.T) {
	var q exitQueue
	q.add(1)
	q.add(2)
	pids, overflow := q.take()
	assert.Equal(t, []uint32{1, 2}, pids)
	assert.False(t, overflow)
	pids, overflow = q.take()
	assert.Empty(t, pids)
	assert.False(t, overflow)

	for i := range maxQueuedExits + 5 {
		q.add(uint32(i))
	}
	pids, overflow = q.take()
	assert.Len(t, pids, maxQueuedExits)
	assert.True(t, overflow, "the exits that did not fit make the report check every process")
	_, overflow = q.take()
	assert.False(t, overflow)
}

// A process that exited before its identity was read leaves no entry in the
// symbolizer once its exit is reported: the next lookup of a process with
// its pid reads the maps again.
func TestForgetExitedUnreadProcess(t *testing.T) {
	proc := procfs.FS{Root: t.TempDir()} // no process at all: every pid has exited
	r := &profilerReceiver{
		ids:     identity.New(identity.Options{Proc: proc, HostName: "h", SelfPID: 1}),
		symbols: symbolize.New(symbolize.Options{Proc: proc}),
	}
	const pid = 4242
	r.symbols.User(pid, []uint64{0x1000}) // its samples, reported after it exited
	r.symbols.User(pid, []uint64{0x1000})
	require.Equal(t, uint64(1), r.symbols.Stats().MapRefreshes, "the maps of a cached process are read once a second")
	r.forgetExited([]uint32{pid}, false)
	r.symbols.User(pid, []uint64{0x1000})
	assert.Equal(t, uint64(2), r.symbols.Stats().MapRefreshes, "the exited process is still cached")
}
