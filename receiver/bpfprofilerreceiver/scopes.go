package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/scopejoin"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
)

// Bounds of what joining scopes to profiles holds in memory.
const (
	maxHeldScopeSamples = 1 << 16 // samples waiting for their scope's record
	maxSentScopes       = 1 << 17 // records remembered for linking
	maxDurationStacks   = 1 << 16 // (probe, thread, entry stack) sums per report
)

// scopeJoin joins probe scopes to profiles: the map of open scopes the
// kernel programs share and the linker of samples to records (nil without
// linking), and the durations of scopes by entry stack (nil without a
// probe with stacks).
type scopeJoin struct {
	open      *scopemap.Maps
	linker    *scopejoin.Linker
	durations *scopejoin.Durations
	probeIDs  []string
}

// openScopeJoin readies joining for the probes that ask for it, before the
// sources open: linking needs profiling (profiling) and the probes attached
// (a logs pipeline); entry stacks need somewhere to send profiles to.
func (r *profilerReceiver) openScopeJoin(profiling bool) error {
	specs := r.cfg.probeSpecs()
	if len(specs) == 0 || r.logsConsumer() == nil {
		return nil
	}
	j := &scopeJoin{}
	for _, s := range specs {
		j.probeIDs = append(j.probeIDs, s.ID)
	}
	if profiling && slices.ContainsFunc(specs, func(s probes.Spec) bool { return s.LinkSamples }) {
		m, err := scopemap.New()
		if err != nil {
			return fmt.Errorf("link probe scopes to samples: %w", explainSourceError(err))
		}
		j.open = m
		j.linker = scopejoin.New(scopejoin.Options{
			IDs:     r.scopeIDs.Of,
			Probes:  j.probeIDs,
			Reports: 2, // two report intervals

			MaxHeld:    maxHeldScopeSamples,
			MaxRecords: maxSentScopes,
		})
	}
	for i, s := range specs {
		if !s.EntryStack {
			continue
		}
		if r.profilesConsumer() == nil && r.cfg.Pprof.Directory == "" {
			r.settings.Logger.Warn(fmt.Sprintf("probes[%d]::stacks: the receiver is in no profiles pipeline and pprof::directory is empty: no probe_duration profile", i))
			continue
		}
		j.durations = scopejoin.NewDurations(maxDurationStacks)
	}
	r.scopes = j
	return nil
}

// openScopes are the maps of open scopes the sources read; nil: none.
func (j *scopeJoin) openScopes() *scopemap.Maps {
	if j == nil {
		return nil
	}
	return j.open
}

// read notes scopes just read: sent, those whose records were buffered to
// become log records; all, every one read.
func (r *profilerReceiver) scopesRead(ctx context.Context, sent, all []capture.RawScope) {
	j := r.scopes
	if j == nil {
		return
	}
	if j.linker != nil {
		j.linker.Completed(sent)
	}
	if j.durations == nil {
		return
	}
	for probe, n := range j.durations.Add(all) {
		if probe >= 0 && probe < len(j.probeIDs) {
			r.telemetry.BpfprofilerProbeStacksDropped.Add(ctx, int64(n),
				metric.WithAttributes(attribute.String(attrkey.ProbeID, j.probeIDs[probe])))
		}
	}
}

// joinScopes links the samples of profiles taken inside probe scopes (see
// scopejoin.Linker; final: hold none back) and adds each probe's
// probe_duration profile of the report window start..end.
func (r *profilerReceiver) joinScopes(ctx context.Context, start, end time.Time, profiles []report.Profile, final bool) []report.Profile {
	j := r.scopes
	if j == nil {
		return profiles
	}
	if j.linker != nil {
		var out scopejoin.Outcomes
		profiles, out = j.linker.Link(time.Now(), profiles, final)
		for probe, counts := range out {
			for _, o := range scopejoin.AllOutcomes {
				if n := counts[o]; n > 0 && probe < len(j.probeIDs) {
					r.telemetry.BpfprofilerProbeSamples.Add(ctx, int64(n), metric.WithAttributes(
						attribute.String(attrkey.ProbeID, j.probeIDs[probe]), attribute.String(attrOutcome, o.Reason())))
				}
			}
		}
	}
	if j.durations == nil {
		return profiles
	}
	byProbe := j.durations.Drain()
	for probe := range len(j.probeIDs) {
		stacks := byProbe[probe]
		if len(stacks) == 0 {
			continue
		}
		prof, _ := r.assembler.Assemble(report.KindProbeDuration, start, end, 0, stacks)
		prof.ProbeID = j.probeIDs[probe]
		if len(prof.Processes) > 0 {
			profiles = append(profiles, prof)
		}
	}
	return profiles
}

// close releases the open scopes map, once the sources and probes are closed.
func (j *scopeJoin) close(logger *zap.Logger) {
	if j == nil || j.open == nil {
		return
	}
	if err := j.open.Close(); err != nil {
		logger.Warn("close the open scopes map", zap.Error(err))
	}
	j.open = nil
}
