package bpfprofilerreceiver

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/procread"
)

// When the identity and mappings of an announced process are read
// (procread): a process that lives readDelay, as long as its unwind tables
// wait (internal/unwinder), gets its tables, its identity and its symbols;
// one that exits before costs no read of /proc. An exec storm of
// longer-lived processes is read at readsPerSecond, readBurst at once (each
// read is a few files of /proc and the maps); maxWaitingReads bound those
// waiting.
const (
	readDelay       = 100 * time.Millisecond
	readSlack       = 10 * time.Millisecond // reads due this soon are done with those due now
	readsPerSecond  = 100
	readBurst       = 1000
	maxWaitingReads = 1 << 14
)

// processReads is the schedule of reads with its lock: followProcesses
// changes it, the report counts it.
type processReads struct {
	mu       sync.Mutex
	sched    *procread.Schedule
	recorded procread.Stats // the counts already added to the telemetry
	// contexts are the process context counts already added.
	contexts identity.ContextStats
}

func newProcessReads() *processReads {
	return &processReads{sched: procread.New(procread.Options{
		Delay: readDelay, Max: maxWaitingReads, Rate: readsPerSecond, Burst: readBurst,
	})}
}

// followProcesses follows the processes the sources announce (one channel
// per profile kind, nil for a kind not profiled). A new process is read
// once it has lived readDelay, so its stacks still resolve when they are
// drained after it exited; one that exits or execs before is never read,
// and its samples are named by the thread name the kernel recorded. A
// process that exec'ed is forgotten: what was read is of its old program
// (its next sample announces the new one). One that exited is forgotten
// after the next report, which drains its last samples.
func (r *profilerReceiver) followProcesses(ctx context.Context, in [2]<-chan capture.ProcessEvent) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for in[0] != nil || in[1] != nil {
		var ev capture.ProcessEvent
		ok, due := true, false
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-in[0]:
			if !ok {
				in[0] = nil
			}
		case ev, ok = <-in[1]:
			if !ok {
				in[1] = nil
			}
		case <-timer.C:
			due = true
		}
		if !ok {
			continue
		}
		now := time.Now()
		var pids []uint32
		if due {
			// The announcements of every source come at the same
			// instants (stackdrain): their reads are done in one wakeup.
			pids = r.reads.due(now.Add(readSlack))
		} else {
			r.handleProcessEvent(ev, now)
		}
		for _, pid := range pids {
			_, _ = r.ids.Resolve(pid)
			r.symbols.Prefetch(pid)
		}
		if next, ok := r.reads.next(now); ok {
			timer.Reset(next.Sub(now))
		} else {
			timer.Stop()
		}
	}
}

func (r *profilerReceiver) handleProcessEvent(ev capture.ProcessEvent, now time.Time) {
	switch {
	case ev.Exec:
		r.reads.gone(ev.PID)
		r.ids.Forget(ev.PID)
		r.symbols.ForgetProcess(ev.PID)
	case ev.Exit:
		r.reads.gone(ev.PID)
		r.exits.add(ev.PID)
	case ev.Rescan:
		// New mappings: the unwind tables reload them; the symbolizer
		// reads the maps again on a miss.
	default:
		// A new process, or a pid another process had before.
		r.ids.Announce(ev.PID)
		r.reads.announce(ev.PID, now)
	}
}

func (p *processReads) announce(pid uint32, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sched.Announce(pid, now)
}

func (p *processReads) gone(pid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sched.Gone(pid)
}

func (p *processReads) due(now time.Time) []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched.Due(now)
}

func (p *processReads) next(now time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched.Next(now)
}

// recordProcessReads adds the reads counted since the previous call to the
// telemetry, by outcome.
func (r *profilerReceiver) recordProcessReads(ctx context.Context) {
	p := r.reads
	p.mu.Lock()
	st, prev := p.sched.Stats(), p.recorded
	p.recorded = st
	p.mu.Unlock()
	for outcome, n := range map[string]uint64{
		readDone:    st.Read - prev.Read,
		readExited:  st.Exited - prev.Exited,
		readDropped: st.Dropped - prev.Dropped,
	} {
		if n > 0 {
			r.telemetry.BpfprofilerProcessReads.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrOutcome, outcome)))
		}
	}
}

// recordProcessContexts adds the process context reads counted since the
// previous call to the telemetry, by outcome.
func (r *profilerReceiver) recordProcessContexts(ctx context.Context) {
	st := r.ids.ContextStats()
	p := r.reads
	p.mu.Lock()
	prev := p.contexts
	p.contexts = st
	p.mu.Unlock()
	add := func(outcome string, n uint64) {
		if n > 0 {
			r.telemetry.BpfprofilerProcessContexts.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrOutcome, outcome)))
		}
	}
	add(contextRead, st.Read-prev.Read)
	for reason, n := range st.Failed {
		add(reason, n-prev.Failed[reason])
	}
}
