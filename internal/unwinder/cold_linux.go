//go:build linux

package unwinder

import (
	"errors"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// coldTableAge is how long no walk must have used a table in use before
// its rows may go to a new table that does not fit otherwise (idle tables
// go first). The processes mapping its file walk it again once the rescan
// their next walk there asks for has loaded it again.
const coldTableAge = time.Minute

// evictedTable is bpf/unwind.h UNWIND_TABLE_EVICTED: a mapping whose table
// was evicted (rows 0).
const evictedTable = 0xffffffff

// usedBatch is how many slots of Maps.Used one syscall reads.
const usedBatch = 4096

// markUsed stamps the tables walks used since the last call with now and
// clears their marks: a syscall per usedBatch slots handed out, whatever
// the number of processes.
func (l *Loader) markUsed(now time.Time) {
	if l.maps.Used == nil {
		return
	}
	bySlot := make(map[uint32]*fileTable, len(l.files))
	for _, t := range l.files {
		if t.rows > 0 {
			bySlot[t.slot] = t
		}
	}
	// Slots above the highest ever handed out were never used.
	limit := l.budget.next
	keys, values := make([]uint32, min(usedBatch, limit)), make([]uint32, min(usedBatch, limit))
	var cursor ebpf.MapBatchCursor
	for done := uint32(0); done < limit; {
		count := min(usedBatch, limit-done)
		n, err := l.maps.Used.BatchLookup(&cursor, keys[:count], values[:count], nil)
		done += uint32(n)
		for i := range n {
			if values[i] == 0 {
				continue
			}
			if t := bySlot[keys[i]]; t != nil {
				t.usedAt = now
			}
			_ = l.maps.Used.Put(keys[i], uint32(0)) // an array: always there
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return // the array's end
		case err != nil: // no batch lookups (before 5.6)
			l.markUsedEach(bySlot, now)
			return
		case n == 0:
			return
		}
	}
}

// markUsedEach is markUsed one table at a time.
func (l *Loader) markUsedEach(bySlot map[uint32]*fileTable, now time.Time) {
	var used uint32
	for slot, t := range bySlot {
		if l.maps.Used.Lookup(slot, &used) == nil && used != 0 {
			t.usedAt = now
			_ = l.maps.Used.Put(slot, uint32(0))
		}
	}
}

// coldTables are the tables in use that no walk used for coldTableAge, the
// longest unused first.
func (l *Loader) coldTables(now time.Time) []*fileTable {
	if l.maps.Used == nil {
		return nil
	}
	seen := map[*fileTable]bool{}
	var cold []*fileTable
	for _, t := range l.files {
		if t.rows > 0 && t.idleSince.IsZero() && now.Sub(t.usedAt) >= coldTableAge && !seen[t] {
			seen[t] = true
			cold = append(cold, t)
		}
	}
	slices.SortFunc(cold, func(a, b *fileTable) int { return a.usedAt.Compare(b.usedAt) })
	return cold
}

// evict takes t from every process mapping its file and removes it: their
// mappings of it say evicted (a walk there ends and asks a rescan, which
// loads it again) before its slot can serve another file. It reads every
// loaded process: done only when a new table needs the room.
func (l *Loader) evict(t *fileTable) {
	for _, lp := range l.procs {
		value := bpf.CpuUnwindMapping{Table: evictedTable, Runtime: lp.inPlace}
		for i, fk := range lp.keyFiles {
			if fk != (fileKey{}) && l.files[fk] == t {
				_ = l.maps.Mappings.Put(&lp.keys[i], &value) // there: lp's entries are loaded
				lp.keyFiles[i] = fileKey{}
			}
		}
		lp.files = slices.DeleteFunc(lp.files, func(k fileKey) bool {
			if l.files[k] != t {
				return false
			}
			t.refs--
			lp.evicted = true
			return true
		})
	}
	l.remove(t, false)
}
