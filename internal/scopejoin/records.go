package scopejoin

import (
	"sync"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// recordLog remembers the scopes whose records were sent, for a while and
// up to a number, and the latest such scope of each probe on each thread.
type recordLog struct {
	mu     sync.Mutex
	max    int
	order  []arrival // oldest first
	sent   map[scopeKey]struct{}
	latest map[threadProbe]arrival
}

type arrival struct {
	key scopeKey
	at  time.Time
}

func newRecordLog(maxRecords int) recordLog {
	return recordLog{max: max(maxRecords, 1), sent: map[scopeKey]struct{}{}, latest: map[threadProbe]arrival{}}
}

// add notes scopes read at now, forgetting what is older than keep or
// beyond the bound.
func (r *recordLog) add(now time.Time, scopes []capture.RawScope, keep time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range scopes {
		key := scopeKey{pid: s.PID, tid: s.TID, probe: s.ProbeIndex, start: s.Start}
		if _, ok := r.sent[key]; ok {
			continue
		}
		r.sent[key] = struct{}{}
		r.order = append(r.order, arrival{key: key, at: now})
		tp := threadProbe{pid: s.PID, tid: s.TID, probe: s.ProbeIndex}
		if l, ok := r.latest[tp]; !ok || l.key.start < s.Start {
			r.latest[tp] = arrival{key: key, at: now}
		}
	}
	r.prune(now, keep)
}

// prune forgets records older than keep, then the oldest beyond max.
func (r *recordLog) prune(now time.Time, keep time.Duration) {
	n := 0
	for n < len(r.order) && (now.Sub(r.order[n].at) > keep || len(r.order)-n > r.max) {
		delete(r.sent, r.order[n].key)
		n++
	}
	if n > 0 {
		r.order = append(r.order[:0], r.order[n:]...)
	}
	if len(r.latest) > 2*r.max || n > 0 {
		for tp, a := range r.latest {
			if now.Sub(a.at) > keep {
				delete(r.latest, tp)
			}
		}
	}
}

// snapshot locks the log, pruned at now, until release.
func (r *recordLog) snapshot(now time.Time, keep time.Duration) *recordLog {
	r.mu.Lock()
	r.prune(now, keep)
	return r
}

func (r *recordLog) release() { r.mu.Unlock() }

// has reports whether key's record was sent.
func (r *recordLog) has(key scopeKey) bool {
	_, ok := r.sent[key]
	return ok
}

// laterThan reports whether a scope of key's probe and thread that started
// after key's had its record sent.
func (r *recordLog) laterThan(key scopeKey) bool {
	l, ok := r.latest[threadProbe{pid: key.pid, tid: key.tid, probe: key.probe}]
	return ok && l.key.start > key.start
}
