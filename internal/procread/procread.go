// Package procread decides when a newly announced process is read (its
// identity and its mappings, from /proc): once it has lived Options.Delay,
// at most Options.Rate a second, never if it exited or exec'ed before.
// Short-lived processes (health checks, shells, cron jobs) then cost an
// announcement and an exit and no read; what was not read is read when its
// samples are reported if the process still runs, and named by the thread
// name the kernel recorded if not. The processes waiting are bounded and
// those that do not fit are counted.
package procread

import "time"

// Options configures a Schedule.
type Options struct {
	Delay time.Duration // how long a process must live before it is read
	Max   int           // bound on the processes waiting (and on those remembered as read)
	Rate  float64       // reads per second, on average (positive)
	Burst int           // reads at once, at most (positive)
}

// Stats count what became of announced processes.
type Stats struct {
	Read    uint64 // handed out by Due
	Exited  uint64 // exited or exec'ed before they were due: never read
	Dropped uint64 // found the schedule full: not read ahead of their samples
}

// Schedule holds the processes announced and not yet read, in the order
// they are due. Not safe for concurrent use.
type Schedule struct {
	opts  Options
	due   map[uint32]time.Time
	order []entry // by due time; an entry whose pid is no longer due then is stale
	// read are the pids handed out since their last exec or exit: a
	// second announcement (another source's) does not read them again.
	read   map[uint32]struct{}
	tokens float64   // reads allowed now (the token bucket)
	filled time.Time // when tokens was last topped up
	stats  Stats
}

type entry struct {
	pid uint32
	at  time.Time
}

// New returns an empty Schedule. A Rate or Burst that is not positive is
// taken as 1.
func New(opts Options) *Schedule {
	if opts.Rate <= 0 {
		opts.Rate = 1
	}
	opts.Burst = max(opts.Burst, 1)
	return &Schedule{opts: opts, due: map[uint32]time.Time{}, read: map[uint32]struct{}{}, tokens: float64(opts.Burst)}
}

// Announce schedules the read of pid, a process first seen at now. A pid
// already waiting or already read is left as it is.
func (s *Schedule) Announce(pid uint32, now time.Time) {
	if _, ok := s.due[pid]; ok {
		return
	}
	if _, ok := s.read[pid]; ok {
		return
	}
	if len(s.due) >= s.opts.Max {
		s.stats.Dropped++
		return
	}
	at := now.Add(s.opts.Delay)
	s.due[pid] = at
	s.order = append(s.order, entry{pid, at})
}

// Gone forgets pid: it exited, or exec'ed (its next sample announces the
// new program). A read still waiting is cancelled.
func (s *Schedule) Gone(pid uint32) {
	if _, ok := s.due[pid]; ok {
		delete(s.due, pid)
		s.stats.Exited++
	}
	delete(s.read, pid)
}

// Due returns the pids to read at now, in the order they were announced,
// as many as the rate allows; the others stay waiting.
func (s *Schedule) Due(now time.Time) []uint32 {
	s.refill(now)
	var pids []uint32
	i := 0
	for ; i < len(s.order) && !s.order[i].at.After(now); i++ {
		e := s.order[i]
		if at, ok := s.due[e.pid]; !ok || !at.Equal(e.at) {
			continue // stale
		}
		if s.tokens < 1 {
			break
		}
		s.tokens--
		pids = append(pids, e.pid)
		delete(s.due, e.pid)
		if len(s.read) >= s.opts.Max {
			clear(s.read) // forgetting costs at most a second read
		}
		s.read[e.pid] = struct{}{}
	}
	s.order = s.order[i:]
	if len(s.order) == 0 {
		s.order = nil // let the array go
	}
	s.stats.Read += uint64(len(pids))
	return pids
}

// refill adds the tokens earned since the last refill (a now before it
// adds none).
func (s *Schedule) refill(now time.Time) {
	switch {
	case s.filled.IsZero():
		s.filled = now
	case now.After(s.filled):
		s.tokens = min(s.tokens+now.Sub(s.filled).Seconds()*s.opts.Rate, float64(s.opts.Burst))
		s.filled = now
	}
}

// Next is when Due has something to return, at the earliest: the first
// due time, or when the rate allows the next read; false when nothing
// waits.
func (s *Schedule) Next(now time.Time) (time.Time, bool) {
	for len(s.order) > 0 {
		e := s.order[0]
		if at, ok := s.due[e.pid]; ok && at.Equal(e.at) {
			s.refill(now)
			if s.tokens >= 1 {
				return e.at, true
			}
			wait := time.Duration((1 - s.tokens) / s.opts.Rate * float64(time.Second))
			return later(e.at, s.filled.Add(wait)), true
		}
		s.order = s.order[1:]
	}
	s.order = nil
	return time.Time{}, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Waiting is the number of processes waiting for their read.
func (s *Schedule) Waiting() int { return len(s.due) }

// Stats returns the counts since New.
func (s *Schedule) Stats() Stats { return s.stats }
