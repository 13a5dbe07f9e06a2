//go:build linux

package sampler

import (
	"sync/atomic"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// sweepInterval is how often the unwind maps are cleared of processes that
// exited.
const sweepInterval = 5 * time.Second

// unwinding loads the unwind tables of each announced process, off the
// sampling path, then hands the announcement on. Until its tables are
// loaded a process's stacks are walked with frame pointers.
type unwinding struct {
	loader *unwinder.Loader
	events chan capture.ProcessEvent
	drops  atomic.Uint64 // announcements NewProcesses' reader had no room for
	done   chan struct{}
	// reportedFailures are the loader's failures addStats reported (the
	// sampler's lock serializes its calls).
	reportedFailures capture.TableFailures
}

func startUnwinding(l *unwinder.Loader, in <-chan capture.ProcessEvent) *unwinding {
	u := &unwinding{loader: l, events: make(chan capture.ProcessEvent, stackdrain.NewProcessesBuffer), done: make(chan struct{})}
	go u.run(in)
	return u
}

// run ends when in is closed, and then closes events.
func (u *unwinding) run(in <-chan capture.ProcessEvent) {
	defer close(u.done)
	defer close(u.events)
	sweep := time.NewTicker(sweepInterval)
	defer sweep.Stop()
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			if ev.Exec {
				// The new program is announced at its first sample.
				u.loader.Forget(ev.PID)
			} else {
				_ = u.loader.Load(ev.PID) // counted in the loader's stats
			}
			select {
			case u.events <- ev:
			default:
				u.drops.Add(1)
			}
		case <-sweep.C:
			u.loader.Sweep()
		}
	}
}

func (u *unwinding) wait() { <-u.done }

// addStats adds to st the announcements dropped, the tables loaded and the
// files left without one since the previous call.
func (u *unwinding) addStats(st *capture.Stats) {
	st.NewProcessDrops += u.drops.Swap(0)
	ls := u.loader.Stats()
	st.UnwindTables = ls.Tables
	st.UnwindTableBytes = ls.RowsUsed * unwinder.RowBytes
	for i, n := range ls.Failed {
		st.TableFailures[i] += n - u.reportedFailures[i]
	}
	u.reportedFailures = ls.Failed
}
