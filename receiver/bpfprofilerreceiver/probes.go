package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
)

// probeRunner attaches the configured probes and turns their records into
// log records for the logs pipeline: the records are buffered (bounded, see
// recordBuffer) and delivered once per report interval, or sooner when a
// batch is full, one plog.Logs per batch. A refused batch is counted and
// dropped, never retried.
type probeRunner struct {
	r      *profilerReceiver
	specs  []probes.Spec
	names  []assemble.Probe // by probe index
	source probeSource
	buf    *recordBuffer

	readerDone, flusherDone chan struct{}
	stopOnce                sync.Once

	flushMu        sync.Mutex          // one flush at a time
	reported       []probes.ProbeDrops // kernel drops already counted, by probe
	reportedLabels probes.LabelLoss    // goroutine labels' losses already counted

	warnMu sync.Mutex
	warned map[string]bool // drop reasons already logged once
}

// startProbes attaches the probes.
func (r *profilerReceiver) startProbes(ctx context.Context, opts sourceOptions) error {
	specs := r.cfg.probeSpecs()
	if len(specs) == 0 {
		return nil
	}
	if r.logsConsumer() == nil {
		r.settings.Logger.Warn("probes are configured but the receiver is in no logs pipeline: probes are not attached")
		return nil
	}
	src, err := r.kernel.probes(specs, opts)
	if err != nil {
		return fmt.Errorf("start probes: %w", kernelcheck.Explain(err))
	}
	p := &probeRunner{
		r: r, specs: specs, names: scopeNames(specs), source: src,
		buf:         newRecordBuffer(maxBufferedProbeRecords, probeBatchRecords),
		readerDone:  make(chan struct{}),
		flusherDone: make(chan struct{}),
		reported:    make([]probes.ProbeDrops, len(specs)),
		warned:      map[string]bool{},
	}
	r.probes = p
	st := src.Stats()
	r.settings.Logger.Info("probes attached", zap.Int("probes", len(specs)), zap.Int("files", st.Files),
		zap.Int("uprobes", st.Links), zap.Int("missing_symbols", st.Missing), zap.Int("refused", st.Refused))
	go func() {
		defer close(p.readerDone)
		if err := src.Run(ctx, p.read); err != nil {
			r.settings.Logger.Warn("probe records reader stopped", zap.Error(err))
		}
	}()
	go func() {
		defer close(p.flusherDone)
		p.flushLoop(ctx)
	}()
	return nil
}

// stop detaches every probe and waits for the reader and the flush loop
// (whose context the caller cancelled, or cancels next). Idempotent.
func (p *probeRunner) stop() {
	p.stopOnce.Do(func() {
		if err := p.source.Close(); err != nil {
			p.r.settings.Logger.Warn("detach probes", zap.Error(err))
		}
		<-p.readerDone
		<-p.flusherDone
	})
}

// read runs on the reader goroutine with scopes just read from the kernel:
// it notes their process identities and buffers what fits.
func (p *probeRunner) read(raw []capture.RawScope) {
	ctx := context.Background()
	batch := assemble.ReadScopes(p.r.ids, raw)
	p.count(ctx, p.r.telemetry.BpfprofilerProbeRecords, batch)
	n := p.buf.add(batch)
	if n < len(batch) {
		p.dropped(ctx, batch[n:], dropBufferFull, "the next consumer is slow: probe records dropped, the receiver buffer is full",
			zap.Int("max_buffered", p.buf.max))
	}
	// Records are buffered in the order read: the first n become log records.
	p.r.scopesRead(ctx, raw[:n], raw)
}

// flushLoop delivers the buffered records every report interval, and when a
// batch is full, until ctx is done.
func (p *probeRunner) flushLoop(ctx context.Context) {
	tick := time.NewTicker(p.r.cfg.ReportInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.buf.ready:
		}
		p.flush(ctx, false)
	}
}

// flushAll delivers what is left once the source is stopped (Shutdown).
func (p *probeRunner) flushAll(ctx context.Context) { p.flush(ctx, true) }

// flush counts the kernel's drops and delivers the waiting records, batch
// by batch. Unless all, it stops at a partial batch after the first: records
// read while a batch was in delivery wait for the next interval instead of
// making a ConsumeLogs call each.
func (p *probeRunner) flush(ctx context.Context, all bool) {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.countKernelDrops(ctx)
	least := 1
	for ctx.Err() == nil {
		batch := p.buf.take(least)
		if len(batch) == 0 {
			return
		}
		p.send(ctx, batch)
		p.buf.done(len(batch))
		if !all {
			least = p.buf.batch
		}
	}
}

// send hands one batch to the logs pipeline as one plog.Logs; a refused
// batch is counted and dropped.
func (p *probeRunner) send(ctx context.Context, batch []assemble.ReadScope) {
	next := p.r.logsConsumer()
	logs, err := pdata.BuildProbeLogs(pdata.Scope{Name: metadata.ScopeName, Version: p.r.settings.BuildInfo.Version},
		time.Now(), assemble.Scopes(p.names, p.r.scopeIDs, batch)...)
	if err == nil && next != nil {
		ctx := p.r.obs.StartLogsOp(ctx)
		err = next.ConsumeLogs(ctx, logs)
		p.r.obs.EndLogsOp(ctx, obsFormat, logs.LogRecordCount(), err)
	}
	if err != nil {
		p.r.reportFailed(ctx, signalLogs)
		p.dropped(ctx, batch, dropRefused, "probe log records dropped: the next consumer refused them", zap.Error(err))
	}
}

// countKernelDrops adds the drops the kernel counted since the last call,
// and the goroutine labels records left out.
func (p *probeRunner) countKernelDrops(ctx context.Context) {
	st := p.source.Stats()
	l, old := st.Labels, p.reportedLabels
	p.r.recordGoLabelsLost(ctx, goLabelLossTruncated, l.Truncated-old.Truncated)
	p.r.recordGoLabelsLost(ctx, goLabelLossUnreadable, l.Unreadable-old.Unreadable)
	p.r.recordGoLabelsLost(ctx, goLabelLossUndecodable, l.Undecodable-old.Undecodable)
	p.reportedLabels = l
	drops := st.Drops
	for i := range min(len(drops), len(p.reported)) {
		d, old := drops[i], p.reported[i]
		p.addDropped(ctx, i, dropRateLimited, d.RateLimited-old.RateLimited)
		p.addDropped(ctx, i, dropRingbufFull, d.RingBufferFull-old.RingBufferFull)
		p.addDropped(ctx, i, dropAbandoned, d.Abandoned-old.Abandoned)
		p.reported[i] = d
	}
}

// dropped counts recs as dropped for reason and logs the first such drop
// (at debug level afterwards).
func (p *probeRunner) dropped(ctx context.Context, recs []assemble.ReadScope, reason, msg string, fields ...zap.Field) {
	byProbe := make([]uint64, len(p.specs))
	for _, rec := range recs {
		byProbe[rec.ProbeIndex]++
	}
	for i, n := range byProbe {
		p.addDropped(ctx, i, reason, n)
	}
	p.warnMu.Lock()
	first := !p.warned[reason]
	p.warned[reason] = true
	p.warnMu.Unlock()
	log := p.r.settings.Logger.Debug
	if first {
		log = p.r.settings.Logger.Warn
	}
	log(msg, append(fields, zap.Int("records", len(recs)), zap.String("reason", reason))...)
}

func (p *probeRunner) addDropped(ctx context.Context, probe int, reason string, n uint64) {
	if n == 0 {
		return
	}
	p.r.telemetry.BpfprofilerProbeRecordsDropped.Add(ctx, int64(n), metric.WithAttributes(
		attribute.String(attrkey.ProbeID, p.specs[probe].ID), attribute.String(attrReason, reason)))
}

// count adds recs to counter, by probe.
func (p *probeRunner) count(ctx context.Context, counter metric.Int64Counter, recs []assemble.ReadScope) {
	byProbe := make([]int64, len(p.specs))
	for _, rec := range recs {
		byProbe[rec.ProbeIndex]++
	}
	for i, n := range byProbe {
		if n > 0 {
			counter.Add(ctx, n, metric.WithAttributes(attribute.String(attrkey.ProbeID, p.specs[i].ID)))
		}
	}
}

// scopeNames names the scopes of each probe as the log records do: a
// function's probe (config `symbol:`) enters and exits the same symbol; a
// USDT probe names its two USDT probes.
func scopeNames(specs []probes.Spec) []assemble.Probe {
	out := make([]assemble.Probe, len(specs))
	for i, s := range specs {
		exit := s.ExitSymbol
		if s.Return {
			exit = s.EntrySymbol
		}
		out[i] = assemble.Probe{ID: s.ID, EntrySymbol: s.EntrySymbol, ExitSymbol: exit, EntryUSDT: s.EntryUSDT, ExitUSDT: s.ExitUSDT}
		for _, a := range s.ArgAttributes() {
			out[i].Args = append(out[i].Args, assemble.ProbeArg{Name: a.Name, String: a.String})
		}
	}
	return out
}
