package scopejoin

import (
	"encoding/binary"
	"sync"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Durations sums the durations of completed scopes by probe, thread and the
// user stack that entered the scope, until drained. It is safe for
// concurrent use.
type Durations struct {
	mu      sync.Mutex
	max     int
	entries map[durationKey]*capture.RawStack
}

type durationKey struct {
	probe    int
	pid, tid uint32
	loss     capture.StackLoss
	stack    string // the frames, 8 bytes each
}

// NewDurations returns Durations holding at most maxEntries distinct
// (probe, thread, stack) sums between drains.
func NewDurations(maxEntries int) *Durations {
	return &Durations{max: maxEntries, entries: map[durationKey]*capture.RawStack{}}
}

// Add adds the duration of each scope to its entry stack's sum; scopes of
// probes that keep no entry stack (no stack, no loss) are skipped. It
// returns how many scopes of each probe index were dropped for want of
// room.
func (d *Durations) Add(scopes []capture.RawScope) (dropped map[int]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range scopes {
		if len(s.EntryStack) == 0 && s.EntryStackLoss == capture.StackKept {
			continue
		}
		b := make([]byte, 0, 8*len(s.EntryStack))
		for _, a := range s.EntryStack {
			b = binary.LittleEndian.AppendUint64(b, a)
		}
		key := durationKey{probe: s.ProbeIndex, pid: s.PID, tid: s.TID, loss: s.EntryStackLoss, stack: string(b)}
		e, ok := d.entries[key]
		if !ok {
			if len(d.entries) >= d.max {
				if dropped == nil {
					dropped = map[int]int{}
				}
				dropped[s.ProbeIndex]++
				continue
			}
			e = &capture.RawStack{
				PID: s.PID, TID: s.TID, Comm: s.Comm, UserLoss: s.EntryStackLoss,
				Frames: capture.StackFrames(nil, s.EntryStack),
			}
			d.entries[key] = e
		}
		e.Value += uint64(s.Duration())
	}
	return dropped
}

// Drain returns the sums by probe index (nanoseconds, one RawStack per
// thread and stack) and empties them.
func (d *Durations) Drain() map[int][]capture.RawStack {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int][]capture.RawStack{}
	for k, e := range d.entries {
		out[k.probe] = append(out[k.probe], *e)
	}
	clear(d.entries)
	return out
}
