//go:build linux

package unwinder

import (
	"errors"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// idleTableTTL is how long the table of a file no process maps any more
// stays loaded: a program run again and again (cron jobs, health checks,
// shells) finds its table ready instead of building it at each run. Idle
// tables are also evicted, oldest first, when a new table needs their rows.
const idleTableTTL = 2 * time.Minute

// fileStamp is what tells the file a table was built from from another
// file that later got its device and inode: its size and change time.
type fileStamp struct{ size, ctimeNs int64 }

func stampOf(f *os.File) (fileStamp, bool) {
	fi, err := f.Stat()
	if err != nil {
		return fileStamp{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{}, false
	}
	return fileStamp{size: fi.Size(), ctimeNs: st.Ctim.Nano()}, true
}

// retire keeps t, whose last process was forgotten, loaded but idle; a
// table without rows has nothing worth keeping.
func (l *Loader) retire(t *fileTable) {
	if t.rows == 0 {
		l.remove(t, false)
		return
	}
	t.idleSince = time.Now()
}

// remove deletes t from the loader and releases its rows: at once (no
// mapping has pointed at them for releaseDelay), or after releaseDelay.
func (l *Loader) remove(t *fileTable, now bool) {
	for _, k := range t.keys {
		if l.files[k] == t {
			delete(l.files, k)
		}
	}
	if t.buildID != "" && l.byBuild[t.buildID] == t {
		delete(l.byBuild, t.buildID)
	}
	if t.rows == 0 {
		return
	}
	// Its memory goes at once (a walk still holding it keeps it until
	// done), its slot once no walk can look it up.
	_ = l.maps.Files.Delete(t.slot) // not there: nothing to free
	l.budget.releaseRows(t.rows)
	if now {
		l.budget.releaseSlot(t.slot)
	} else {
		l.pending = append(l.pending, pendingRelease{t.slot, time.Now()})
	}
	t.rows = 0
}

// revive takes idle t back for the file of m, the key it was found under,
// when that file is still the one t was built from (same size and change
// time); otherwise t is removed and false returned. When the mapping is
// gone from pid, t stays as it is (false).
func (l *Loader) revive(pid uint32, m procfs.Map, key fileKey, t *fileTable) bool {
	want, ok := t.stamps[key]
	if ok {
		name := l.proc.RootPath(pid, strings.TrimSuffix(m.Path, " (deleted)"))
		f, err := procfs.Within(l.deadline, name, func() (*os.File, error) { return l.proc.OpenMappedFile(pid, m) },
			func(f *os.File) { f.Close() })
		if errors.Is(err, procfs.ErrMappingGone) {
			return false // nothing known of the file: kept for the next process
		}
		if err == nil {
			got, okStamp := stampOf(f)
			f.Close()
			ok = okStamp && got == want
		} else {
			ok = false
		}
	}
	if !ok {
		l.remove(t, false)
		return false
	}
	t.idleSince, t.usedAt = time.Time{}, time.Now() // in use again: not cold
	l.stats.IdleReused++
	return true
}

// idleTables returns the idle tables, oldest first, once each.
func (l *Loader) idleTables() []*fileTable {
	seen := map[*fileTable]bool{}
	var idle []*fileTable
	for _, t := range l.files {
		if !t.idleSince.IsZero() && !seen[t] {
			seen[t] = true
			idle = append(idle, t)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].idleSince.Before(idle[j].idleSince) })
	return idle
}

// expireIdle removes the tables idle for idleTableTTL.
func (l *Loader) expireIdle(now time.Time) {
	for _, t := range l.idleTables() {
		if now.Sub(t.idleSince) < idleTableTTL {
			break
		}
		l.remove(t, true)
	}
}

// allocEvicting takes a slot and n rows of the budget, evicting idle
// tables (oldest first, those idle for releaseDelay: no walk can still look
// them up), then cold ones (coldTables), until they fit.
func (l *Loader) allocEvicting(n uint32) (uint32, bool) {
	if slot, ok := l.budget.alloc(n); ok {
		return slot, true
	}
	now := time.Now()
	for _, t := range l.idleTables() {
		if now.Sub(t.idleSince) < releaseDelay {
			break
		}
		l.remove(t, true)
		l.stats.IdleEvicted++
		if slot, ok := l.budget.alloc(n); ok {
			return slot, true
		}
	}
	for _, t := range l.coldTables(now) {
		l.evict(t)
		l.stats.ColdEvicted++
		if slot, ok := l.budget.alloc(n); ok {
			return slot, true
		}
	}
	return 0, false
}
