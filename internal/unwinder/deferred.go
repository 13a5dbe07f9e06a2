package unwinder

import "time"

// loadDelay is how long a newly announced process must live before its
// tables are loaded: most short-lived processes (health checks, shells,
// cron jobs) exit before, and then cost one announcement and one exit, no
// read of their mappings. Their samples meanwhile are walked with frame
// pointers, as every process's are before its tables load.
const loadDelay = 100 * time.Millisecond

// maxDeferredLoads bounds the processes waiting for loadDelay; past it an
// announced process is loaded at once.
const maxDeferredLoads = 1 << 14

// deferredLoads are the processes announced and not yet loaded, in the
// order they are due. Not safe for concurrent use (the Follower's).
type deferredLoads struct {
	due   map[uint32]time.Time
	order []deferredLoad // by due time; an entry whose pid is no longer due then is stale
}

type deferredLoad struct {
	pid uint32
	at  time.Time
}

// add defers pid's load until now+loadDelay; false when the queue is full.
func (d *deferredLoads) add(pid uint32, now time.Time) bool {
	if d.due == nil {
		d.due = map[uint32]time.Time{}
	}
	if len(d.due) >= maxDeferredLoads {
		return false
	}
	at := now.Add(loadDelay)
	d.due[pid] = at
	d.order = append(d.order, deferredLoad{pid, at})
	return true
}

// cancel drops pid's deferred load, and says whether there was one.
func (d *deferredLoads) cancel(pid uint32) bool {
	_, ok := d.due[pid]
	delete(d.due, pid)
	return ok
}

// take returns the pids due at now, in order, and drops them.
func (d *deferredLoads) take(now time.Time) []uint32 {
	var pids []uint32
	i := 0
	for ; i < len(d.order) && !d.order[i].at.After(now); i++ {
		e := d.order[i]
		if at, ok := d.due[e.pid]; ok && at.Equal(e.at) {
			pids = append(pids, e.pid)
			delete(d.due, e.pid)
		}
	}
	d.order = d.order[i:]
	if len(d.order) == 0 {
		d.order = nil // let the array go
	}
	return pids
}

// next is when the first deferred load is due; false when none is.
func (d *deferredLoads) next() (time.Time, bool) {
	for len(d.order) > 0 {
		e := d.order[0]
		if at, ok := d.due[e.pid]; ok && at.Equal(e.at) {
			return e.at, true
		}
		d.order = d.order[1:]
	}
	return time.Time{}, false
}
