package unwinder

import "time"

// A walk that ends at an address in none of its process's mappings asks for
// a rescan, at most every 2 s per process (bpf/announce.h). Most such
// addresses are no new mapping: a Go program's walk ends so wherever its
// runtime switched stacks, a garbage return address ends another's. Reading
// a JVM's thousands of mappings every 2 s for nothing is the cost this
// avoids: after a rescan found the executable mappings unchanged, the
// process's next requests are dropped for a while, doubling per fruitless
// rescan up to maxRescanBackoff. A new library is then found within that
// bound, meanwhile its frames end their walks as no_mapping.
const (
	firstRescanBackoff = 4 * time.Second
	maxRescanBackoff   = 32 * time.Second
	// maxRescanBackoffs bounds the processes remembered; past it a
	// process's rescans are not held back.
	maxRescanBackoffs = 1 << 14
)

// rescanBackoffs are the processes whose rescans are held back. Not safe for
// concurrent use (the Follower's).
type rescanBackoffs map[uint32]rescanBackoff

type rescanBackoff struct {
	until time.Time
	wait  time.Duration
}

// due says whether pid's rescan requested at now is to be done.
func (b rescanBackoffs) due(pid uint32, now time.Time) bool {
	e, ok := b[pid]
	return !ok || !now.Before(e.until)
}

// done records the outcome of pid's rescan at now: changed resets its
// backoff, unchanged doubles it.
func (b rescanBackoffs) done(pid uint32, now time.Time, changed bool) {
	if changed {
		delete(b, pid)
		return
	}
	e, ok := b[pid]
	if !ok && len(b) >= maxRescanBackoffs {
		return
	}
	e.wait = min(max(2*e.wait, firstRescanBackoff), maxRescanBackoff)
	e.until = now.Add(e.wait)
	b[pid] = e
}

// forget drops pid (it exec'ed or exited).
func (b rescanBackoffs) forget(pid uint32) { delete(b, pid) }
