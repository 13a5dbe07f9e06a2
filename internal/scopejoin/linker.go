// Package scopejoin joins probe scopes to profiles: the Linker links samples
// taken inside a scope to the scope's log record, once the record is known
// to exist; Durations weighs the stacks that entered each probe's scopes by
// how long the scopes lasted.
package scopejoin

import (
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Outcome says what became of a sample taken inside a probe scope; each
// outcome but Linked leaves the sample unlinked.
type Outcome uint8

const (
	Linked   Outcome = iota // its scope's record was sent: linked
	NoRecord                // its scope ended without a record (min_duration, rate limit, full buffers)
	Timeout                 // no record came within Options.Reports reports
	HeldFull                // too many samples were waiting already
	numOutcomes
)

// AllOutcomes lists every Outcome, in order.
var AllOutcomes = []Outcome{Linked, NoRecord, Timeout, HeldFull}

// Reason is the outcome's telemetry attribute value.
func (o Outcome) Reason() string {
	return [...]string{"linked", "no_record", "timeout", "held_full"}[o]
}

// Outcomes counts samples (aggregated stacks) by probe index and outcome.
type Outcomes map[int]*[numOutcomes]uint64

func (o Outcomes) add(probe int, out Outcome) {
	c, ok := o[probe]
	if !ok {
		c = new([numOutcomes]uint64)
		o[probe] = c
	}
	c[out]++
}

// IDs gives a scope instance its trace and span id (assemble.ScopeIDs.Of).
type IDs func(pid, tid uint32, probeIndex int, start uint64) (trace [16]byte, span [8]byte)

// Options configures a Linker.
type Options struct {
	IDs IDs
	// Probes names each probe (by index) in the links.
	Probes []string
	// Reports is how many later Link calls (reports) a sample held back
	// waits for its scope's record at most; records are remembered for one
	// report more. Counting reports rather than time keeps a report that
	// runs late from forgetting records its samples need.
	Reports int
	// MaxHeld bounds the samples waiting; MaxRecords the records
	// remembered (the oldest are forgotten first).
	MaxHeld, MaxRecords int
}

// Linker links samples to scope records. Completed and Link may run
// concurrently; Link calls must not.
type Linker struct {
	opts Options

	records recordLog // guarded by records.mu
	held    []heldSample
}

// reportNumber counts Link calls.
type reportNumber uint64

// scopeKey names one scope instance.
type scopeKey struct {
	pid, tid uint32
	probe    int
	start    uint64
}

// threadProbe names the scopes of one probe on one thread, which follow
// one another.
type threadProbe struct {
	pid, tid uint32
	probe    int
}

// heldSample is a sample waiting for its scope's record, with what is
// needed to put it back into a profile.
type heldSample struct {
	kind     report.Kind
	period   int64
	identity report.Identity
	sample   report.Sample
	since    reportNumber
}

// New returns a Linker.
func New(opts Options) *Linker {
	return &Linker{opts: opts, records: newRecordLog(opts.MaxRecords)}
}

// Completed notes scopes whose records are sent.
func (l *Linker) Completed(scopes []capture.RawScope) {
	l.records.add(scopes)
}

// Link resolves the scope of every sample of profiles (the report of now)
// taken inside one (report.Sample.Scope): linked when its scope's record is
// known, left unlinked when the scope ended without one, else held back
// (removed from its profile) until a later call, at most Options.Reports
// calls. The samples held before come back into the profiles of their kind
// (a profile of the kind ending now is added if profiles has none); with
// final, none is held. Linked samples get report.Sample.Link; every sample
// leaves with Scope nil.
func (l *Linker) Link(now time.Time, profiles []report.Profile, final bool) ([]report.Profile, Outcomes) {
	out := Outcomes{}
	snap := l.records.snapshot(l.opts.Reports + 1)
	defer l.records.release()
	this := snap.report

	var back []heldSample
	kept := l.held[:0]
	for _, h := range l.held {
		expired := final || this-h.since >= reportNumber(l.opts.Reports)
		switch o, ok := l.resolve(snap, h.identity.PID, &h.sample, expired); {
		case ok:
			out.add(h.sample.Scope.ProbeIndex, o)
			h.sample.Scope = nil
			back = append(back, h)
		default:
			kept = append(kept, h)
		}
	}
	l.held = kept

	for pi := range profiles {
		p := &profiles[pi]
		for ci := range p.Processes {
			proc := &p.Processes[ci]
			samples := proc.Samples[:0]
			for _, s := range proc.Samples {
				if s.Scope == nil {
					samples = append(samples, s)
					continue
				}
				o, ok := l.resolve(snap, proc.Identity.PID, &s, final)
				if !ok && len(l.held) >= l.opts.MaxHeld {
					o, ok = HeldFull, true
				}
				if !ok {
					l.held = append(l.held, heldSample{kind: p.Kind, period: p.Period, identity: proc.Identity, sample: s, since: this})
					continue
				}
				out.add(s.Scope.ProbeIndex, o)
				s.Scope = nil
				samples = append(samples, s)
			}
			proc.Samples = samples
		}
	}
	return putBack(profiles, back, now), out
}

// resolve links s when its scope's record is known and reports whether it
// is resolved; with expired, an unresolved sample times out.
func (l *Linker) resolve(snap *recordLog, pid uint32, s *report.Sample, expired bool) (Outcome, bool) {
	sc := s.Scope
	key := scopeKey{pid: pid, tid: s.TID, probe: sc.ProbeIndex, start: sc.Start}
	known := snap.has(key)
	if sc.Goroutine {
		// The record names the thread the goroutine ended the scope on. A
		// goroutine's scope that ends without a record times out: no later
		// record on a thread says it ended.
		key.tid, known = snap.threadOf(key.started())
	}
	switch {
	case known:
		trace, span := l.opts.IDs(pid, key.tid, sc.ProbeIndex, sc.Start)
		link := &report.ScopeLink{TraceID: trace, SpanID: span}
		if sc.ProbeIndex >= 0 && sc.ProbeIndex < len(l.opts.Probes) {
			link.ProbeID = l.opts.Probes[sc.ProbeIndex]
		}
		s.Link = link
		return Linked, true
	case !sc.Goroutine && snap.laterThan(key):
		// A later scope of the probe on the thread has its record: this
		// one ended, and sent none.
		return NoRecord, true
	case expired:
		return Timeout, true
	}
	return 0, false
}

// putBack adds held samples back into the profiles of their kind, in their
// process (added when missing); a kind without a profile gets one ending now.
func putBack(profiles []report.Profile, back []heldSample, now time.Time) []report.Profile {
	for _, h := range back {
		pi := -1
		for i := range profiles {
			if profiles[i].Kind == h.kind && profiles[i].ProbeID == "" {
				pi = i
				break
			}
		}
		if pi < 0 {
			profiles = append(profiles, report.Profile{Kind: h.kind, Start: now, End: now, Period: h.period})
			pi = len(profiles) - 1
		}
		p := &profiles[pi]
		ci := -1
		for i := range p.Processes {
			if p.Processes[i].Identity.PID == h.identity.PID {
				ci = i
				break
			}
		}
		if ci < 0 {
			p.Processes = append(p.Processes, report.Process{Identity: h.identity})
			ci = len(p.Processes) - 1
		}
		p.Processes[ci].Samples = append(p.Processes[ci].Samples, h.sample)
	}
	return profiles
}

// Held is the number of samples waiting.
func (l *Linker) Held() int { return len(l.held) }
