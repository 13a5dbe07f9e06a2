package assemble

import (
	"sort"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Probe names the scopes of one configured probe; a capture.RawScope's
// ProbeIndex indexes the []Probe given to Scopes.
type Probe struct {
	ID                      string
	EntrySymbol, ExitSymbol string
	EntryUSDT, ExitUSDT     string // "provider:name" of a USDT probe's pair
	// Args name the USDT arguments of its records, in their order
	// (capture.RawScope.Args).
	Args []ProbeArg
}

// ProbeArg is the attribute of one USDT argument: its name, and whether
// it is the string the argument pointed at (else the integer).
type ProbeArg struct {
	Name   string
	String bool
}

// ReadScope is a raw scope with what was known when it was read from the
// kernel: its process's identity (the process may be gone when the scope is
// sent) and the read time (unix ns), the log record's observed time.
type ReadScope struct {
	capture.RawScope
	Identity report.Identity
	Observed uint64
}

// ReadScopes notes the identity of each scope's process (resolved once per
// pid; a gone process keeps its pid) and stamps them as observed now.
func ReadScopes(ids Identities, raw []capture.RawScope) []ReadScope {
	observed := clock.UnixNanos(clock.Now())
	seen := map[uint32]report.Identity{}
	out := make([]ReadScope, len(raw))
	for i, s := range raw {
		id, ok := seen[s.PID]
		if !ok {
			id, _ = ids.Resolve(s.PID)
			seen[s.PID] = id
		}
		out[i] = ReadScope{RawScope: s, Identity: id, Observed: observed}
	}
	return out
}

// Scopes groups scopes by process, ordered by pid, names them after their
// probe and gives them their ids; kernel times become unix times. A scope
// whose ProbeIndex is outside probes is skipped (the probes package never
// hands one over).
func Scopes(probes []Probe, ids ScopeIDs, scopes []ReadScope) []report.ProcessScopes {
	byPID := map[uint32]*report.ProcessScopes{}
	var pids []uint32
	for _, s := range scopes {
		if s.ProbeIndex < 0 || s.ProbeIndex >= len(probes) {
			continue
		}
		ps, ok := byPID[s.PID]
		if !ok {
			ps = &report.ProcessScopes{Identity: s.Identity}
			byPID[s.PID] = ps
			pids = append(pids, s.PID)
		}
		ps.Records = append(ps.Records, scopeRecord(probes[s.ProbeIndex], ids, s))
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	out := make([]report.ProcessScopes, len(pids))
	for i, pid := range pids {
		out[i] = *byPID[pid]
	}
	return out
}

func scopeRecord(p Probe, ids ScopeIDs, s ReadScope) report.ScopeRecord {
	trace, span := ids.Of(s.PID, s.TID, s.ProbeIndex, s.Start)
	end := clock.UnixNanos(s.End)
	return report.ScopeRecord{
		TraceID:     trace,
		SpanID:      span,
		ProbeID:     p.ID,
		EntrySymbol: p.EntrySymbol,
		ExitSymbol:  p.ExitSymbol,
		EntryUSDT:   p.EntryUSDT,
		ExitUSDT:    p.ExitUSDT,
		// One offset for both ends: the duration stays the kernel's
		// even when the offset is measured again in between.
		Start:      end - (s.End - s.Start),
		End:        end,
		Observed:   s.Observed,
		TID:        s.TID,
		ThreadName: s.Comm,
		MainThread: s.MainThread(),
		Labels:     s.GoLabels,
		Args:       scopeArgs(p.Args, s.Args),
	}
}

// scopeArgs names a scope's USDT arguments after their attributes; an
// argument that was not read is left out.
func scopeArgs(names []ProbeArg, args []capture.ProbeArg) []report.ScopeArg {
	var out []report.ScopeArg
	for i, n := range names {
		if i >= len(args) || args[i].Failed {
			continue
		}
		a := report.ScopeArg{Key: n.Name, IsString: n.String}
		if n.String {
			a.Str = args[i].Str
		} else {
			a.Int = args[i].Int
		}
		out = append(out, a)
	}
	return out
}
