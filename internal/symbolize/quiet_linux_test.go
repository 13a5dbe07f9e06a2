//go:build linux

package symbolize

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// slowProcess is a runtime process whose first read does not answer until
// released; later reads name every frame "fn".
type slowProcess struct {
	release chan struct{}
	mu      sync.Mutex
	reads   int
}

func (p *slowProcess) Cached(uint64, uint32, time.Time) (runtimes.Frame, bool) {
	return runtimes.Frame{}, false
}

func (p *slowProcess) Read(uint64, uint32, time.Time) (runtimes.Frame, error) {
	p.mu.Lock()
	p.reads++
	first := p.reads == 1
	p.mu.Unlock()
	if first {
		<-p.release
	}
	return runtimes.Frame{Function: "fn"}, nil
}

func (p *slowProcess) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// A process whose memory misses the deadline once (a loaded node) has its
// runtime frames unnamed while it is waited out, is not read while that
// read runs, and is named again after: it loses a second of frames, not
// all of them for its life.
func TestRuntimeMemoryWaitedOut(t *testing.T) {
	const rt = report.FramePython
	fs := fakeProcess(t, pid, jitMaps, "/usr/bin/python3", nil)
	s, logs := observed(fs)
	s.deadline = procfs.NewDeadline(50*time.Millisecond, 4)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	mem, err := os.Open(os.DevNull)
	require.NoError(t, err)
	slow := &slowProcess{release: make(chan struct{})}
	s.process(pid).runtimes = map[string]*runtimeProcess{rt: {frames: slow, mem: mem}}
	name := func() string { f := s.Runtime(pid, rt, 0x10, 0, 0); return f[len(f)-1].Function }

	assert.Empty(t, name(), "the read that misses its deadline")
	assert.Empty(t, name(), "while that read runs")
	assert.Equal(t, 1, slow.count(), "not asked while its read runs")
	close(slow.release)
	require.Eventually(t, func() bool { return s.deadline.InFlight() == 0 }, 5*time.Second, time.Millisecond)
	assert.Empty(t, name(), "still waited out")
	now = now.Add(firstQuiet)
	assert.Equal(t, "fn", name(), "read again once waited out")
	assert.Equal(t, 2, slow.count())
	assert.Equal(t, map[string]uint64{RuntimeMemory: 3}, s.Stats().RuntimeUnsymbolized[rt])
	assert.Len(t, logs.FilterMessageSnippet("did not answer in time").All(), 1)

	// Each miss in a row waits twice as long, up to maxQuiet.
	rp := s.process(pid).runtimes[rt]
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		s.noAnswer(rp, pid, rt, errQuiet, now)
		assert.Equal(t, want, rp.quiet)
	}
	rp.quiet = maxQuiet
	s.noAnswer(rp, pid, rt, errQuiet, now)
	assert.Equal(t, maxQuiet, rp.quiet)
}
