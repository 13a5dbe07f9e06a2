//go:build linux

package unwinder

import (
	"math/rand/v2"
	"time"
)

// How long processes wait for their unwind tables: from the loader's first
// load of a process to the build of the last table its mappings waited
// for (until then those mappings are walked with frame pointers). A
// process whose files were all built before waits 0; a reload (dlopen,
// new JIT code) is not counted again.

// maxReadyWaits bounds the waits kept between two takes: past it a uniform
// sample of them is kept, so a burst of starts costs no more memory.
const maxReadyWaits = 4096

// readyWaits are the waits noted since the last take.
type readyWaits struct {
	waits []time.Duration
	seen  int
}

func (r *readyWaits) note(d time.Duration) {
	r.seen++
	if len(r.waits) < maxReadyWaits {
		r.waits = append(r.waits, d)
		return
	}
	if i := rand.IntN(r.seen); i < maxReadyWaits {
		r.waits[i] = d
	}
}

// noteReady notes lp's wait once none of its mappings waits for a table.
func (l *Loader) noteReady(lp *loadedProcess, now time.Time) {
	if lp.building > 0 || lp.waitingSince.IsZero() {
		return
	}
	l.ready.note(now.Sub(lp.waitingSince))
	lp.waitingSince = time.Time{}
}

// takeReadyWaits returns the waits noted since the previous call: how
// long each process announced since waited for its tables.
func (l *Loader) takeReadyWaits() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.ready.waits
	l.ready = readyWaits{}
	return w
}
