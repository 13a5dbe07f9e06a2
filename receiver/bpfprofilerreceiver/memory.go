package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/allocs"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Values of the memory_loss and memory_executable_outcome attributes.
const (
	memLossRingbufFull = "ringbuf_full"
	memLossEvicted     = "evicted"
	memLossReplaced    = "replaced"
	memLossStackLost   = "stack_lost"
	memLossLabelsLost  = "labels_lost"
	memLossArgsLost    = "args_lost"
	memProbed          = "probed"
	memRefused         = "refused"
)

// memorySource is the kernel side of the heap profiles (allocs.Manager).
type memorySource interface {
	Drain() allocs.Window
	Stats() allocs.Stats
	Close() error
}

// openKernelMemory probes the allocation hooks of Go executables
// (memory::go) and the otel_memory probes of mapped files (memory::usdt).
func openKernelMemory(cfg *Config, opts sourceOptions) (memorySource, error) {
	if err := kernelcheck.Check(); err != nil {
		return nil, err
	}
	return allocs.Open(allocs.Options{
		Proc: opts.proc, Logger: opts.logger, PIDNamespace: opts.pidns,
		Go: cfg.Memory.Go, USDT: cfg.Memory.USDT, USDTInterval: cfg.Memory.USDTInterval,
		TargetPIDs: opts.targets, MaxLive: cfg.Memory.MaxLive,
	})
}

// memoryProfiles assembles the report window's heap profiles.
func (r *profilerReceiver) memoryProfiles(ctx context.Context, start, end time.Time) []report.Profile {
	if r.memory == nil {
		return nil
	}
	w := r.memory.Drain()
	r.recordMemoryStats(ctx)
	var out []report.Profile
	for _, k := range []struct {
		kind   report.Kind
		stacks []capture.RawStack
	}{
		{report.KindAllocObjects, w.AllocObjects}, {report.KindAllocSpace, w.AllocSpace},
		{report.KindInuseObjects, w.InuseObjects}, {report.KindInuseSpace, w.InuseSpace},
	} {
		if len(k.stacks) == 0 {
			continue
		}
		prof, ast := r.assembler.Assemble(k.kind, start, end, allocs.DefaultRate, k.stacks)
		r.telemetry.BpfprofilerFramesUnsymbolized.Add(ctx, int64(ast.Unsymbolized))
		hideRuntime(&prof)
		if len(prof.Processes) > 0 {
			out = append(out, prof)
		}
	}
	return out
}

// hideRuntime drops the leading runtime frames of each sample (the
// allocator and its profiling hooks), as runtime/pprof's heap profile
// does, unless nothing would be left.
func hideRuntime(p *report.Profile) {
	for pi := range p.Processes {
		for si := range p.Processes[pi].Samples {
			s := &p.Processes[pi].Samples[si]
			i := 0
			for i < len(s.Frames) && strings.HasPrefix(s.Frames[i].Function, "runtime.") {
				i++
			}
			if i < len(s.Frames) {
				s.Frames = s.Frames[i:]
			}
		}
	}
}

// recordMemoryStats counts what the heap profiles' source did since the
// last report, and logs once each that allocation events were lost or
// live objects dropped.
func (r *profilerReceiver) recordMemoryStats(ctx context.Context) {
	st, last := r.memory.Stats(), r.memoryStats
	r.memoryStats = st
	tel := r.telemetry
	tel.BpfprofilerMemorySamples.Add(ctx, int64(st.Mallocs-last.Mallocs))
	for _, l := range []struct {
		reason string
		n      uint64
	}{
		{memLossRingbufFull, st.RingbufFull - last.RingbufFull}, {memLossEvicted, st.Evicted - last.Evicted},
		{memLossReplaced, st.Replaced - last.Replaced}, {memLossStackLost, st.StackLost - last.StackLost},
		{memLossLabelsLost, st.LabelsLost - last.LabelsLost}, {memLossArgsLost, st.USDTArgsLost - last.USDTArgsLost},
	} {
		if l.n > 0 {
			tel.BpfprofilerMemoryLosses.Add(ctx, int64(l.n), metric.WithAttributes(attribute.String(attrReason, l.reason)))
		}
	}
	for _, o := range []struct {
		outcome string
		n       int
	}{{memProbed, st.Executables + st.USDTFiles - last.Executables - last.USDTFiles}, {memRefused, st.Refused - last.Refused}} {
		if o.n > 0 {
			tel.BpfprofilerMemoryExecutables.Add(ctx, int64(o.n), metric.WithAttributes(attribute.String(attrOutcome, o.outcome)))
		}
	}
	if st.RingbufFull > 0 && !r.memoryWarned[0] {
		r.memoryWarned[0] = true
		r.settings.Logger.Warn("allocation events lost: the ring buffer was full; heap profiles undercount",
			zap.Uint64("lost", st.RingbufFull))
	}
	if st.Evicted > 0 && !r.memoryWarned[1] {
		r.memoryWarned[1] = true
		r.settings.Logger.Warn("live sampled objects dropped, oldest first, to stay within memory::max_live; inuse profiles undercount",
			zap.Uint64("dropped", st.Evicted), zap.Int("max_live", r.cfg.Memory.MaxLive))
	}
	if st.ExecsDropped > 0 && !r.memoryWarned[3] {
		r.memoryWarned[3] = true
		r.settings.Logger.Warn("processes that exec'ed not looked at for heap profiles: too many execs at once",
			zap.Uint64("dropped", st.ExecsDropped))
	}
	if st.USDTArgsLost > 0 && !r.memoryWarned[2] {
		r.memoryWarned[2] = true
		r.settings.Logger.Warn("otel_memory probe arguments could not be read; heap profiles undercount",
			zap.Uint64("lost", st.USDTArgsLost))
	}
}
