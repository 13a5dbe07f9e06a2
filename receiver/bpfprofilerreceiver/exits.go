package bpfprofilerreceiver

import "sync"

// maxQueuedExits bounds the exits held between two reports; past it the
// report checks every process instead (identity.Resolver.Prune).
const maxQueuedExits = 1 << 16

// exitQueue holds the pids of processes the kernel announced as exited
// until the report that drains their last samples has named them: what was
// read about a process is forgotten one report after it exits, never by
// polling every process.
type exitQueue struct {
	mu       sync.Mutex
	pids     []uint32
	overflow bool // more exits than maxQueuedExits since the last take
}

func (q *exitQueue) add(pid uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pids) >= maxQueuedExits {
		q.overflow = true
		return
	}
	q.pids = append(q.pids, pid)
}

// take returns the queued pids and whether some did not fit, and empties
// the queue.
func (q *exitQueue) take() (pids []uint32, overflow bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	pids, overflow = q.pids, q.overflow
	q.pids, q.overflow = nil, false
	return pids, overflow
}

// forgetExited drops what was read about the processes announced as exited,
// once their samples are reported; when announcements were lost (a full ring
// buffer or queue) it checks every process instead. An exited process whose
// identity was never read (it exited before its read was due) may still
// have an entry in the symbolizer from its samples: that goes too, so the
// dead do not push the living out of its cache.
func (r *profilerReceiver) forgetExited(exited []uint32, lost bool) {
	var gone []uint32
	if lost {
		gone = r.ids.Prune()
	} else {
		gone = r.ids.ForgetExited(exited)
	}
	for _, pid := range gone {
		r.symbols.ForgetProcess(pid)
	}
	for _, pid := range exited {
		if !r.ids.Known(pid) {
			r.symbols.ForgetProcess(pid)
		}
	}
}
