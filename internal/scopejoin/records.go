package scopejoin

import (
	"sync"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// recordLog remembers the scopes whose records were sent, for a number of
// reports and up to a number of records, and the latest such scope of each
// probe on each thread.
type recordLog struct {
	mu     sync.Mutex
	max    int
	report reportNumber // Link calls so far, this one included once snapshot
	order  []arrival    // oldest first
	sent   map[scopeKey]struct{}
	latest map[threadProbe]arrival
	// threads names the thread of each record by its process, probe and
	// start: a goroutine's scope is known to its samples by those alone.
	threads map[startKey]uint32
}

// startKey names a scope instance without its thread.
type startKey struct {
	pid   uint32
	probe int
	start uint64
}

// arrival is a record and the report it arrived before.
type arrival struct {
	key    scopeKey
	report reportNumber
}

func newRecordLog(maxRecords int) recordLog {
	return recordLog{max: max(maxRecords, 1), sent: map[scopeKey]struct{}{}, latest: map[threadProbe]arrival{},
		threads: map[startKey]uint32{}}
}

// add notes scopes read since the last report, forgetting the oldest beyond
// the bound.
func (r *recordLog) add(scopes []capture.RawScope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.report + 1
	for _, s := range scopes {
		key := scopeKey{pid: s.PID, tid: s.TID, probe: s.ProbeIndex, start: s.Start}
		if _, ok := r.sent[key]; ok {
			continue
		}
		r.sent[key] = struct{}{}
		if _, ok := r.threads[key.started()]; !ok {
			r.threads[key.started()] = key.tid
		}
		r.order = append(r.order, arrival{key: key, report: next})
		tp := threadProbe{pid: s.PID, tid: s.TID, probe: s.ProbeIndex}
		if l, ok := r.latest[tp]; !ok || l.key.start < s.Start {
			r.latest[tp] = arrival{key: key, report: next}
		}
	}
	r.prune(0)
}

// prune forgets the records that arrived keep reports or more before this
// one (keep 0: none), then the oldest beyond max.
func (r *recordLog) prune(keep int) {
	old := func(a arrival) bool { return keep > 0 && r.report-a.report >= reportNumber(keep) }
	n := 0
	for n < len(r.order) && (old(r.order[n]) || len(r.order)-n > r.max) {
		key := r.order[n].key
		delete(r.sent, key)
		if tid, ok := r.threads[key.started()]; ok && tid == key.tid {
			delete(r.threads, key.started())
		}
		n++
	}
	if n > 0 {
		r.order = append(r.order[:0], r.order[n:]...)
	}
	if keep > 0 || len(r.latest) > 2*r.max {
		for tp, a := range r.latest {
			if keep > 0 && old(a) || keep == 0 && a.report < r.report {
				delete(r.latest, tp)
			}
		}
	}
}

// snapshot counts a report, prunes what arrived keep reports before it and
// locks the log until release.
func (r *recordLog) snapshot(keep int) *recordLog {
	r.mu.Lock()
	r.report++
	r.prune(keep)
	return r
}

func (r *recordLog) release() { r.mu.Unlock() }

// has reports whether key's record was sent.
func (r *recordLog) has(key scopeKey) bool {
	_, ok := r.sent[key]
	return ok
}

// threadOf returns the thread of the record of the scope that started at
// key's start in its process and probe, whatever key's thread.
func (r *recordLog) threadOf(key startKey) (uint32, bool) {
	tid, ok := r.threads[key]
	return tid, ok
}

func (k scopeKey) started() startKey { return startKey{pid: k.pid, probe: k.probe, start: k.start} }

// laterThan reports whether a scope of key's probe and thread that started
// after key's had its record sent.
func (r *recordLog) laterThan(key scopeKey) bool {
	l, ok := r.latest[threadProbe{pid: key.pid, tid: key.tid, probe: key.probe}]
	return ok && l.key.start > key.start
}
