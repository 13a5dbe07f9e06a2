package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/offcpu"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/sampler"
	"github.com/bpfprofiler/bpfprofiler/internal/scopejoin"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
)

// Attribute values of the receiver's own telemetry, in one place: the enums
// of metadata.yaml (and so documentation.md) list exactly these
// (TestTelemetryAttributeValuesDocumented).
const (
	attrKind   = "kind"
	attrSignal = "signal"
	attrStack  = "stack"
	attrReason = "reason"
	attrMech   = "mechanism"
	// attrOutcome says what became of samples taken inside a probe scope.
	attrOutcome = "outcome"

	kindCPU    = "cpu"
	kindOffCPU = "off_cpu"

	signalProfiles = "profiles"
	signalLogs     = "logs"
	signalPprof    = "pprof"

	stackUser   = "user"
	stackKernel = "kernel"

	// mechanism: how the kernel records samples (see offcpu.Mechanism)
	mechPerfEvent = sampler.Mechanism
	mechTaskWork  = string(offcpu.MechanismTaskWork)
	mechSwitchOut = string(offcpu.MechanismSwitchOut)

	// samples_lost reason
	lostMapFull = "map_full"

	// probe_records_dropped reasons
	dropRingbufFull = "ringbuf_full"
	dropRateLimited = "rate_limited"
	dropBufferFull  = "buffer_full"
	dropRefused     = "refused"
	dropAbandoned   = "abandoned"

	// process_reads outcomes
	readDone    = "read"
	readExited  = "exited"
	readDropped = "dropped"

	// process_contexts outcomes besides the identity package's reasons
	contextRead = "read"

	// thread_context_attributes_lost reasons
	attrLossTruncated  = "truncated"
	attrLossUnreadable = "unreadable"
	attrLossUnnamed    = "unnamed"

	// go_labels_lost reasons
	goLabelLossTruncated   = "truncated"
	goLabelLossUnreadable  = "unreadable"
	goLabelLossUndecodable = "undecodable"

	// context_processes sources
	sourceThreadContext = "thread_context"
	sourceGoLabels      = "go_labels"
	attrSource          = "source"
	// python_processes: the interpreter's version
	attrVersion = "version"

	// context_processes_failed reasons
	failureUnresolved  = "unresolved"
	failureUnsupported = "unsupported"
	failureFailed      = "failed"
	failureNoLabels    = "no_labels"
)

// emittedAttributeValues lists, by metadata.yaml attribute name, every value
// the code emits.
func emittedAttributeValues() map[string][]string {
	var stackReasons, unwindEnds, tableFailures, runtimeEnds, sampleOutcomes, threadOutcomes []string
	for _, o := range capture.AllThreadContextOutcomes {
		threadOutcomes = append(threadOutcomes, o.Reason())
	}
	var goOutcomes []string
	for _, o := range capture.AllGoLabelOutcomes {
		goOutcomes = append(goOutcomes, o.Reason())
	}
	for _, o := range scopejoin.AllOutcomes {
		sampleOutcomes = append(sampleOutcomes, o.Reason())
	}
	for _, l := range capture.AllStackLosses {
		stackReasons = append(stackReasons, l.Reason())
	}
	for _, e := range capture.AllUnwindEnds {
		unwindEnds = append(unwindEnds, e.Reason())
	}
	for _, f := range capture.AllTableFailures {
		tableFailures = append(tableFailures, f.Reason())
	}
	for _, e := range capture.AllRuntimeEnds {
		runtimeEnds = append(runtimeEnds, e.Reason())
	}
	runtimeUnsymbolized := []string{symbolize.RuntimeNoInterpreter, symbolize.RuntimeMemory, symbolize.RuntimeBadObject}
	return map[string][]string{
		"kind":                          {kindCPU, kindOffCPU},
		"mechanism":                     {mechPerfEvent, mechTaskWork, mechSwitchOut},
		"signal":                        {signalProfiles, signalLogs, signalPprof},
		"stack":                         {stackUser, stackKernel},
		"sample_loss_reason":            {lostMapFull},
		"stack_loss_reason":             stackReasons,
		"probe_drop_reason":             {dropRingbufFull, dropRateLimited, dropBufferFull, dropRefused, dropAbandoned},
		"unwind_end":                    unwindEnds,
		"table_failure":                 tableFailures,
		"python_end":                    runtimeEnds,
		"ruby_end":                      runtimeEnds,
		"php_end":                       runtimeEnds,
		"probe_sample_outcome":          sampleOutcomes,
		"process_read_outcome":          {readDone, readExited, readDropped},
		"process_context_outcome":       append([]string{contextRead}, identity.ContextReasons...),
		"thread_context_outcome":        threadOutcomes,
		"thread_context_attribute_loss": {attrLossTruncated, attrLossUnreadable, attrLossUnnamed},
		"go_labels_outcome":             goOutcomes,
		"go_labels_loss":                {goLabelLossTruncated, goLabelLossUnreadable, goLabelLossUndecodable},
		"context_source":                {sourceThreadContext, sourceGoLabels},
		"context_failure":               {failureUnresolved, failureUnsupported, failureFailed, failureNoLabels},
		"python_unsymbolized_reason":    runtimeUnsymbolized,
		"jvm_unsymbolized_reason":       runtimeUnsymbolized,
		"v8_unsymbolized_reason":        runtimeUnsymbolized,
		"ruby_unsymbolized_reason":      runtimeUnsymbolized,
		"php_unsymbolized_reason":       runtimeUnsymbolized,
		"memory_loss":                   {memLossRingbufFull, memLossEvicted, memLossReplaced, memLossStackLost, memLossLabelsLost, memLossArgsLost},
		"memory_executable_outcome":     {memProbed, memRefused},
	}
}

// kindValue is the kind attribute value of a profile kind.
func kindValue(k report.Kind) string {
	if k == report.KindOffCPU {
		return kindOffCPU
	}
	return kindCPU
}

// recordSourceStats adds one drain window of one kind, recorded by
// mechanism, to the counters.
func (r *profilerReceiver) recordSourceStats(ctx context.Context, kind report.Kind, mechanism string, st capture.Stats) {
	tel := r.telemetry
	k := attribute.String(attrKind, kindValue(kind))
	tel.BpfprofilerSamplesRecorded.Add(ctx, int64(st.Recorded), metric.WithAttributes(k, attribute.String(attrMech, mechanism)))
	if st.LostMapFull > 0 {
		tel.BpfprofilerSamplesLost.Add(ctx, int64(st.LostMapFull),
			metric.WithAttributes(k, attribute.String(attrReason, lostMapFull)))
	}
	for _, loss := range capture.AllStackLosses {
		for stack, n := range map[string]uint64{stackUser: st.UserStackLost[loss], stackKernel: st.KernelStackLost[loss]} {
			if n > 0 {
				tel.BpfprofilerStacksLost.Add(ctx, int64(n), metric.WithAttributes(k,
					attribute.String(attrStack, stack), attribute.String(attrReason, loss.Reason())))
			}
		}
	}
	if st.NewProcessDrops > 0 {
		tel.BpfprofilerNewProcessesDropped.Add(ctx, int64(st.NewProcessDrops))
	}
	r.recordUnwindStats(ctx, k, st)
	r.recordPythonStats(ctx, k, st)
	recordRuntimeWalks(ctx, k, st.RubyWalks, tel.BpfprofilerRubyWalks, tel.BpfprofilerRubyWalkFrames, tel.BpfprofilerRubyStacksLost)
	recordRuntimeWalks(ctx, k, st.PHPWalks, tel.BpfprofilerPhpWalks, tel.BpfprofilerPhpWalkFrames, tel.BpfprofilerPhpStacksLost)
	r.recordThreadContextStats(ctx, k, st.ThreadContexts)
	r.recordGoLabelStats(ctx, k, st.GoLabels)
}

// recordUnwindStats adds the unwind counters of one window of one kind,
// and, with unwind tables (shared by the kinds), moves the table gauges to
// their values at its drain.
func (r *profilerReceiver) recordUnwindStats(ctx context.Context, kind attribute.KeyValue, st capture.Stats) {
	tel := r.telemetry
	for _, e := range capture.AllUnwindEnds {
		if n := st.UnwindEnds[e]; n > 0 {
			tel.BpfprofilerUnwindWalks.Add(ctx, int64(n), metric.WithAttributes(kind, attribute.String(attrReason, e.Reason())))
		}
	}
	if st.UnwindFrames > 0 {
		tel.BpfprofilerUnwindFrames.Add(ctx, int64(st.UnwindFrames), metric.WithAttributes(kind))
	}
	if r.cfg.Unwinding.Method != unwindAuto {
		return
	}
	for _, f := range capture.AllTableFailures {
		if n := st.TableFailures[f]; n > 0 {
			tel.BpfprofilerUnwindTablesFailed.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, f.Reason())))
		}
	}
	for _, e := range st.TableFailureNotes {
		r.settings.Logger.Warn("a file got no unwind table: its code is walked with frame pointers; other files failing for the same reason are only counted (otelcol_bpfprofiler_unwind_tables_failed)",
			zap.String("file", e))
	}
	for _, d := range st.TablesReady {
		tel.BpfprofilerUnwindTablesReady.Record(ctx, d.Seconds())
	}
	tel.BpfprofilerUnwindTables.Add(ctx, int64(st.UnwindTables)-int64(r.unwindGauges.tables))
	tel.BpfprofilerUnwindTableBytes.Add(ctx, int64(st.UnwindTableBytes)-int64(r.unwindGauges.bytes))
	r.recordPythonVersions(ctx, st.PythonVersions)
	tel.BpfprofilerJvmProcesses.Add(ctx, int64(st.JVMProcesses)-int64(r.unwindGauges.jvm))
	tel.BpfprofilerV8Processes.Add(ctx, int64(st.V8Processes)-int64(r.unwindGauges.v8))
	r.unwindGauges.tables, r.unwindGauges.bytes = st.UnwindTables, st.UnwindTableBytes
	r.unwindGauges.jvm, r.unwindGauges.v8 = st.JVMProcesses, st.V8Processes
	tel.BpfprofilerRubyProcesses.Add(ctx, int64(st.RubyProcesses)-int64(r.unwindGauges.ruby))
	tel.BpfprofilerPhpProcesses.Add(ctx, int64(st.PHPProcesses)-int64(r.unwindGauges.php))
	r.unwindGauges.ruby, r.unwindGauges.php = st.RubyProcesses, st.PHPProcesses
	tel.BpfprofilerContextProcesses.Add(ctx, int64(st.ThreadContextProcesses)-int64(r.unwindGauges.threadCtx),
		metric.WithAttributes(attribute.String(attrSource, sourceThreadContext)))
	tel.BpfprofilerContextProcesses.Add(ctx, int64(st.GoLabelProcesses)-int64(r.unwindGauges.goLabels),
		metric.WithAttributes(attribute.String(attrSource, sourceGoLabels)))
	r.unwindGauges.threadCtx, r.unwindGauges.goLabels = st.ThreadContextProcesses, st.GoLabelProcesses
	f := st.ContextFailures
	for _, c := range []struct {
		source, reason string
		n              uint64
	}{
		{sourceThreadContext, failureUnresolved, f.ThreadContextUnresolved},
		{sourceThreadContext, failureFailed, f.ThreadContextFailed},
		{sourceGoLabels, failureUnsupported, f.GoLabelsUnsupported},
		{sourceGoLabels, failureFailed, f.GoLabelsFailed},
		{sourceGoLabels, failureNoLabels, f.GoLabelsNoLabels},
	} {
		if c.n > 0 {
			tel.BpfprofilerContextProcessesFailed.Add(ctx, int64(c.n),
				metric.WithAttributes(attribute.String(attrSource, c.source), attribute.String(attrReason, c.reason)))
		}
	}
}

// recordPythonStats adds the CPython walk counters of one window of one
// kind.
func (r *profilerReceiver) recordPythonStats(ctx context.Context, kind attribute.KeyValue, st capture.Stats) {
	tel := r.telemetry
	for _, e := range capture.AllRuntimeEnds {
		if n := st.PythonEnds[e]; n > 0 {
			tel.BpfprofilerPythonWalks.Add(ctx, int64(n), metric.WithAttributes(kind, attribute.String(attrReason, e.Reason())))
		}
	}
	if st.PythonFrames > 0 {
		tel.BpfprofilerPythonFrames.Add(ctx, int64(st.PythonFrames), metric.WithAttributes(kind))
	}
	if st.PythonStackLost > 0 {
		tel.BpfprofilerPythonStacksLost.Add(ctx, int64(st.PythonStackLost), metric.WithAttributes(kind))
	}
	if st.PythonUnsupported > 0 {
		tel.BpfprofilerPythonInterpretersUnsupported.Add(ctx, int64(st.PythonUnsupported))
	}
	for _, e := range st.PythonUnsupportedErrors {
		r.settings.Logger.Warn("a CPython interpreter is not walked: its Python frames stay the interpreter's native ones",
			zap.String("reason", e))
	}
}

// recordRuntimeWalks adds the walk counters of one runtime walked apart
// (Ruby, PHP) of one window of one kind: walks by why they ended, the
// frames they read and the stacks lost.
func recordRuntimeWalks(ctx context.Context, kind attribute.KeyValue, w capture.RuntimeWalks, walks, frames, stacksLost metric.Int64Counter) {
	for _, e := range capture.AllRuntimeEnds {
		if n := w.Ends[e]; n > 0 {
			walks.Add(ctx, int64(n), metric.WithAttributes(kind, attribute.String(attrReason, e.Reason())))
		}
	}
	if w.Frames > 0 {
		frames.Add(ctx, int64(w.Frames), metric.WithAttributes(kind))
	}
	if w.StackLost > 0 {
		stacksLost.Add(ctx, int64(w.StackLost), metric.WithAttributes(kind))
	}
}

// recordThreadContextStats adds the thread context counters of one window
// of one kind.
func (r *profilerReceiver) recordThreadContextStats(ctx context.Context, kind attribute.KeyValue, st capture.ThreadContextStats) {
	tel := r.telemetry
	for _, o := range capture.AllThreadContextOutcomes {
		if n := st.Outcomes[o]; n > 0 {
			tel.BpfprofilerThreadContexts.Add(ctx, int64(n), metric.WithAttributes(kind, attribute.String(attrOutcome, o.Reason())))
		}
	}
	r.recordAttributesLost(ctx, attrLossTruncated, st.AttrsTruncated)
	r.recordAttributesLost(ctx, attrLossUnreadable, st.AttrsLost)
}

// recordGoLabelStats adds the Go label counters of one window of one kind.
func (r *profilerReceiver) recordGoLabelStats(ctx context.Context, kind attribute.KeyValue, st capture.GoLabelStats) {
	for _, o := range capture.AllGoLabelOutcomes {
		if n := st.Outcomes[o]; n > 0 {
			r.telemetry.BpfprofilerGoLabels.Add(ctx, int64(n), metric.WithAttributes(kind, attribute.String(attrOutcome, o.Reason())))
		}
	}
	r.recordGoLabelsLost(ctx, goLabelLossTruncated, st.Truncated)
	r.recordGoLabelsLost(ctx, goLabelLossUnreadable, st.Lost)
}

func (r *profilerReceiver) recordGoLabelsLost(ctx context.Context, reason string, n uint64) {
	if n > 0 {
		r.telemetry.BpfprofilerGoLabelsLost.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, reason)))
	}
}

func (r *profilerReceiver) recordAttributesLost(ctx context.Context, reason string, n uint64) {
	if n > 0 {
		r.telemetry.BpfprofilerThreadContextAttributesLost.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrReason, reason)))
	}
}

// recordPythonSymbolization adds the CPython frames left without a name
// since the previous call, by reason.
func (r *profilerReceiver) recordPythonSymbolization(ctx context.Context, unsymbolized map[string]uint64) {
	for reason, n := range unsymbolized {
		if d := n - r.pythonUnsymbolized[reason]; d > 0 {
			r.telemetry.BpfprofilerPythonFramesUnsymbolized.Add(ctx, int64(d), metric.WithAttributes(attribute.String(attrReason, reason)))
		}
	}
	r.pythonUnsymbolized = unsymbolized
}

// recordJVMSymbolization adds the Java frames named and the interpreted
// ones left without a name since the previous call.
func (r *profilerReceiver) recordJVMSymbolization(ctx context.Context, st symbolize.Stats) {
	r.jvmNamed.record(ctx, st, capture.HotSpot.Name(), r.telemetry.BpfprofilerJvmFrames, r.telemetry.BpfprofilerJvmFramesUnsymbolized)
}

// recordV8Symbolization adds the JavaScript frames named and left without
// a name since the previous call.
func (r *profilerReceiver) recordV8Symbolization(ctx context.Context, st symbolize.Stats) {
	r.v8Named.record(ctx, st, capture.V8.Name(), r.telemetry.BpfprofilerV8Frames, r.telemetry.BpfprofilerV8FramesUnsymbolized)
}

// recordRubySymbolization adds the Ruby frames named and left without a
// name since the previous call.
func (r *profilerReceiver) recordRubySymbolization(ctx context.Context, st symbolize.Stats) {
	r.rubyNamed.record(ctx, st, capture.Ruby.Name(), r.telemetry.BpfprofilerRubyFrames, r.telemetry.BpfprofilerRubyFramesUnsymbolized)
}

// recordPHPSymbolization adds the PHP frames named and left without a name
// since the previous call.
func (r *profilerReceiver) recordPHPSymbolization(ctx context.Context, st symbolize.Stats) {
	r.phpNamed.record(ctx, st, capture.PHP.Name(), r.telemetry.BpfprofilerPhpFrames, r.telemetry.BpfprofilerPhpFramesUnsymbolized)
}

// runtimeNamed is the symbolizer's count of one runtime's frames named and
// left without a name (by reason) when last recorded.
type runtimeNamed struct {
	frames       uint64
	unsymbolized map[string]uint64
}

// record adds the runtime's frames counted since the previous call.
func (n *runtimeNamed) record(ctx context.Context, st symbolize.Stats, runtime string, named, unnamed metric.Int64Counter) {
	if d := st.RuntimeFrames[runtime] - n.frames; d > 0 {
		named.Add(ctx, int64(d))
	}
	n.frames = st.RuntimeFrames[runtime]
	unsymbolized := st.RuntimeUnsymbolized[runtime]
	for reason, c := range unsymbolized {
		if d := c - n.unsymbolized[reason]; d > 0 {
			unnamed.Add(ctx, int64(d), metric.WithAttributes(attribute.String(attrReason, reason)))
		}
	}
	n.unsymbolized = unsymbolized
}

// reportFailed counts one report of signal that could not be built or delivered.
func (r *profilerReceiver) reportFailed(ctx context.Context, signal string) {
	r.telemetry.BpfprofilerReportsFailed.Add(ctx, 1, metric.WithAttributes(attribute.String(attrSignal, signal)))
}

// recordPythonVersions moves the CPython process gauge, one series per
// interpreter version, to now.
func (r *profilerReceiver) recordPythonVersions(ctx context.Context, now map[string]uint64) {
	tel := r.telemetry
	for v, n := range now {
		if d := int64(n) - int64(r.unwindGauges.python[v]); d != 0 {
			tel.BpfprofilerPythonProcesses.Add(ctx, d, metric.WithAttributes(attribute.String(attrVersion, v)))
		}
	}
	for v, n := range r.unwindGauges.python {
		if _, ok := now[v]; !ok && n > 0 {
			tel.BpfprofilerPythonProcesses.Add(ctx, -int64(n), metric.WithAttributes(attribute.String(attrVersion, v)))
		}
	}
	r.unwindGauges.python = maps.Clone(now)
}

// recordSymbolCache records what the symbolizer's caches hold now.
func (r *profilerReceiver) recordSymbolCache(ctx context.Context, now symbolize.CacheSizes) {
	tel, last := r.telemetry, r.symbolCache
	tel.BpfprofilerSymbolCacheFiles.Add(ctx, int64(now.Files-last.Files))
	tel.BpfprofilerSymbolCacheFileBytes.Add(ctx, now.FileBytes-last.FileBytes)
	tel.BpfprofilerSymbolCachePerfMapBytes.Add(ctx, now.PerfMapBytes-last.PerfMapBytes)
	tel.BpfprofilerSymbolCacheProcesses.Add(ctx, int64(now.Processes-last.Processes))
	tel.BpfprofilerSymbolCacheFrames.Add(ctx, int64(now.Frames-last.Frames))
	r.symbolCache = now
}
