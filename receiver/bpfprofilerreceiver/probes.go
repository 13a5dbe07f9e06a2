package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
)

// probeRunner attaches the configured probes and turns their records into
// log records for the logs pipeline.
type probeRunner struct {
	r       *profilerReceiver
	specs   []probes.Spec
	manager *probes.Manager
	done    chan struct{}
	dropped uint64 // ring buffer drops already reported
}

// startProbes attaches the probes; pidns is the collector's pid namespace
// (records then carry pids as the collector's /proc knows them, like the
// profiles).
func (r *profilerReceiver) startProbes(ctx context.Context, pidns procfs.PIDNamespace) error {
	specs := r.cfg.probeSpecs()
	if len(specs) == 0 {
		return nil
	}
	if r.logsConsumer() == nil {
		r.settings.Logger.Warn("probes are configured but the receiver is in no logs pipeline: probes are not attached")
		return nil
	}
	m, err := probes.Open(specs, probes.Options{Proc: r.proc, Logger: r.settings.Logger, PIDNamespace: pidns})
	if err != nil {
		return fmt.Errorf("start probes: %w", err)
	}
	pr := &probeRunner{r: r, specs: specs, manager: m, done: make(chan struct{})}
	r.probes = pr
	st := m.Stats()
	r.settings.Logger.Info("probes attached", zap.Int("probes", len(specs)), zap.Int("files", st.Files),
		zap.Int("uprobes", st.Links), zap.Int("missing_symbols", st.Missing), zap.Int("refused", st.Refused))
	go func() {
		defer close(pr.done)
		if err := m.Run(ctx, pr.deliver); err != nil {
			r.settings.Logger.Warn("probe records reader stopped", zap.Error(err))
		}
	}()
	return nil
}

// stop detaches every probe and waits for the reader.
func (p *probeRunner) stop() {
	if err := p.manager.Close(); err != nil {
		p.r.settings.Logger.Warn("detach probes", zap.Error(err))
	}
	<-p.done
}

// deliver runs on the reader goroutine with a batch of records.
func (p *probeRunner) deliver(recs []probes.Record) {
	ctx := context.Background()
	observed := time.Now()
	byPID := map[uint32]*report.ProcessScopes{}
	for _, rec := range recs {
		ps, ok := byPID[rec.PID]
		if !ok {
			id, _ := p.r.ids.Resolve(rec.PID) // a gone process keeps its pid
			ps = &report.ProcessScopes{Identity: id}
			byPID[rec.PID] = ps
		}
		ps.Records = append(ps.Records, p.scopeRecord(rec))
	}
	processes := make([]report.ProcessScopes, 0, len(byPID))
	for _, ps := range byPID {
		processes = append(processes, *ps)
	}
	sort.Slice(processes, func(i, j int) bool { return processes[i].Identity.PID < processes[j].Identity.PID })

	p.r.telemetry.BpfprofilerProbeRecords.Add(ctx, int64(len(recs)))
	if d := p.manager.Stats().Dropped(); d.RingBufferFull+d.RateLimited > p.dropped {
		dropped := d.RingBufferFull + d.RateLimited
		p.r.telemetry.BpfprofilerProbeRecordsDropped.Add(ctx, int64(dropped-p.dropped))
		p.dropped = dropped
	}
	logs, err := pdata.BuildProbeLogs(pdata.Scope{Name: metadata.ScopeName, Version: p.r.settings.BuildInfo.Version}, observed, processes...)
	if err != nil {
		p.r.settings.Logger.Warn("build probe logs", zap.Error(err))
		p.r.telemetry.BpfprofilerReportsFailed.Add(ctx, 1)
		return
	}
	next := p.r.logsConsumer()
	if next == nil {
		return
	}
	if err := next.ConsumeLogs(ctx, logs); err != nil {
		p.r.settings.Logger.Warn("next consumer refused probe logs", zap.Error(err))
		p.r.telemetry.BpfprofilerReportsFailed.Add(ctx, 1)
	}
}

func (p *probeRunner) scopeRecord(rec probes.Record) report.ScopeRecord {
	spec := p.specs[rec.ProbeIndex]
	exit := spec.ExitSymbol
	if spec.Return {
		exit = spec.EntrySymbol
	}
	return report.ScopeRecord{
		ProbeID:     spec.ID,
		EntrySymbol: spec.EntrySymbol,
		ExitSymbol:  exit,
		Start:       unixNanos(rec.Start),
		End:         unixNanos(rec.End),
		TID:         rec.TID,
		ThreadName:  rec.Comm,
		MainThread:  rec.MainThread(),
	}
}

// unixNanos converts a kernel monotonic timestamp with the offset shared by
// every signal of the receiver.
func unixNanos(mono uint64) uint64 {
	ns, err := clock.ToUnix(mono)
	if err != nil {
		return uint64(time.Now().UnixNano())
	}
	return ns
}

// now is the receiver's wall clock for profile times: the monotonic clock
// with the shared offset, so profiles and probe logs line up.
func now() time.Time {
	return time.Unix(0, int64(unixNanos(clock.Now())))
}
