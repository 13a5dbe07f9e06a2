package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/collector/receiver/receiverhelper/xreceiverhelper"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/allocs"
	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/pdata"
	"github.com/bpfprofiler/bpfprofiler/internal/pproffile"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/symbolize"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadata"
)

// The transport and format of the receiver's operations in the collector's
// receiver metrics: the data comes from the kernel's BPF programs.
const (
	obsTransport = "bpf"
	obsFormat    = "bpf"
)

type profilerReceiver struct {
	cfg       *Config
	settings  receiver.Settings
	telemetry *metadata.TelemetryBuilder
	// obs counts what is handed to the pipelines as the collector's own
	// receiver metrics (otelcol_receiver_accepted_*, _refused_*).
	obs         *receiverhelper.ObsReport  // logs
	profilesObs *xreceiverhelper.ObsReport // profiles: samples counted by sample type
	kernel      kernelSources
	proc        procfs.FS

	mu       sync.Mutex
	profiles xconsumer.Profiles
	logs     consumer.Logs

	cancel    context.CancelFunc
	done      chan struct{}
	sources   map[report.Kind]stackSource
	unwind    *sharedTables // unwind tables the sources share; nil: frame pointers
	assembler *assemble.Assembler
	symbols   *symbolize.Symbolizer
	// scopeIDs gives probe scopes their trace and span ids.
	scopeIDs assemble.ScopeIDs
	ids      *identity.Resolver
	probes   *probeRunner
	// scopes joins probe scopes to profiles; nil: no probe asks for it.
	scopes *scopeJoin
	// memory is the heap profiles' source; nil: memory::go is off.
	memory       memorySource
	memoryStats  allocs.Stats // at the last report
	memoryWarned [4]bool
	// lastDrain is the CLOCK_MONOTONIC time of the last drain: a report's
	// window is as long as the monotonic clock says, ending at the wall
	// clock's now, even across a step of the wall clock.
	lastDrain uint64
	// unwindGauges are the unwind table gauges last recorded.
	unwindGauges struct {
		tables, bytes, jvm, v8, ruby, php, threadCtx, goLabels uint64
		python                                                 map[string]uint64 // by version
	}
	// pythonUnsymbolized is the symbolizer's count of CPython frames left
	// without a name, by reason, when last recorded; jvmNamed, v8Named,
	// rubyNamed and phpNamed its counts of Java, JavaScript, Ruby and PHP
	// frames.
	pythonUnsymbolized                     map[string]uint64
	jvmNamed, v8Named, rubyNamed, phpNamed runtimeNamed
	// symbolCache are the symbolizer's cache gauges last recorded.
	symbolCache symbolize.CacheSizes
	// targetWatch warns once when every target pid has exited.
	targetWatch targetWatch
	// background runs the kernel symbol preload and the followProcesses
	// goroutine.
	background sync.WaitGroup
	// reads schedules the reads of announced processes.
	reads *processReads
	// exits are the processes announced as exited since the last report.
	exits exitQueue
}

func newProfilerReceiver(cfg *Config, set receiver.Settings) (*profilerReceiver, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create telemetry: %w", err)
	}
	obsSettings := receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              obsTransport,
		ReceiverCreateSettings: set,
	}
	obs, err := receiverhelper.NewObsReport(obsSettings)
	if err != nil {
		return nil, fmt.Errorf("create receiver telemetry: %w", err)
	}
	profilesObs, err := xreceiverhelper.NewObsReport(obsSettings)
	if err != nil {
		return nil, fmt.Errorf("create receiver telemetry: %w", err)
	}
	return &profilerReceiver{
		cfg:         cfg,
		settings:    set,
		telemetry:   tb,
		obs:         obs,
		profilesObs: profilesObs,
		kernel:      realKernel,
		proc:        procfs.FS{Root: "/proc"},
		scopeIDs:    assemble.NewScopeIDs(),
		reads:       newProcessReads(),
	}, nil
}

func (r *profilerReceiver) setProfilesConsumer(next xconsumer.Profiles) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.profiles = next
}

func (r *profilerReceiver) setLogsConsumer(next consumer.Logs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = next
}

// Start loads and attaches the kernel programs and starts the report loop.
func (r *profilerReceiver) Start(_ context.Context, _ component.Host) error {
	targets, starts, err := r.resolveTargets()
	if err != nil {
		return err
	}
	if err := checkPprofDirectory(r.cfg.Pprof.Directory); err != nil {
		return err
	}
	warnMissingRuntimeDirs(r.settings.Logger, r.cfg.Kubernetes.HostRoot)
	r.targetWatch = targetWatch{starts: starts}
	pidns, err := r.proc.PIDNamespace(uint32(os.Getpid()))
	if err != nil {
		return fmt.Errorf("find the collector's pid namespace: %w", err)
	}
	srcOpts := sourceOptions{targets: targets, pidns: pidns, proc: r.proc, logger: r.settings.Logger}
	if r.cfg.Unwinding.Method == unwindAuto {
		r.unwind = &sharedTables{proc: r.proc, memory: uint64(r.cfg.Unwinding.TableMemoryMiB) << 20,
			noThreadContexts: !r.cfg.TraceContext.Enabled, noGoLabels: !r.cfg.GoLabels.Enabled}
		srcOpts.unwind = r.unwind
	}
	logger := r.settings.Logger
	r.symbols = symbolize.New(symbolize.Options{
		Proc:            r.proc,
		MaxPerfMapBytes: r.cfg.PerfMaps.MaxSizeMiB << 20,
		Logger:          logger,
	})
	r.ids = identity.New(identity.Options{
		Proc:            r.proc,
		HostRoot:        r.cfg.Kubernetes.HostRoot,
		ProcessContexts: r.cfg.TraceContext.Enabled,
		Logger:          logger,
	})
	r.assembler = &assemble.Assembler{
		Symbols:    r.symbols,
		Identities: r.ids,
		ThreadName: func(pid, tid uint32) string {
			name, _ := r.proc.ThreadComm(pid, tid)
			return name
		},
		Keep: newTargetFilter(r.cfg.Targets).keep,
	}

	r.sources = map[report.Kind]stackSource{}
	profiling := r.cfg.CPU.Enabled || r.cfg.OffCPU.Enabled
	if profiling && r.profilesConsumer() == nil && r.cfg.Pprof.Directory == "" {
		logger.Warn("cpu or off_cpu is enabled but the receiver is in no profiles pipeline and pprof::directory is empty: not profiling")
		profiling = false
	}
	if err := r.openScopeJoin(profiling); err != nil {
		r.closeAll()
		return err
	}
	srcOpts.openScopes = r.scopes.openScopes()
	if r.unwind != nil && srcOpts.openScopes != nil {
		r.unwind.goroutines = true
	}
	var unsupported []error
	for _, k := range []struct {
		kind    report.Kind
		enabled bool
		key     string
	}{{report.KindCPU, r.cfg.CPU.Enabled, "cpu"}, {report.KindOffCPU, r.cfg.OffCPU.Enabled, "off_cpu"}} {
		if !profiling || !k.enabled {
			continue
		}
		src, err := r.kernel.stacks(r.cfg, k.kind, srcOpts)
		switch {
		case errors.Is(err, ebpf.ErrNotSupported):
			// The kernel lacks a feature: the rest keeps running.
			logger.Error(k.key+" profiling is not supported on this kernel; the receiver runs without it",
				zap.String("kernel", kernelcheck.Release()), zap.Error(err))
			unsupported = append(unsupported, fmt.Errorf("%s: %w", k.key, err))
			continue
		case err != nil:
			r.closeAll()
			return fmt.Errorf("start %s profiling: %w", k.key, explainSourceError(err))
		}
		logger.Info(k.key+" profiling started", zap.String("mechanism", src.Mechanism()))
		r.sources[k.kind] = src
	}
	if r.cfg.Memory.enabled() && r.profilesConsumer() == nil && r.cfg.Pprof.Directory == "" {
		logger.Warn("memory::go or memory::usdt is enabled but the receiver is in no profiles pipeline and pprof::directory is empty: no heap profiles")
	} else if r.cfg.Memory.enabled() && r.kernel.memory != nil {
		src, err := r.kernel.memory(r.cfg, srcOpts)
		switch {
		case errors.Is(err, ebpf.ErrNotSupported):
			logger.Error("heap profiles are not supported on this kernel; the receiver runs without them",
				zap.String("kernel", kernelcheck.Release()), zap.Error(err))
			unsupported = append(unsupported, fmt.Errorf("memory: %w", err))
		case err != nil:
			r.closeAll()
			return fmt.Errorf("start heap profiles (memory::go, memory::usdt): %w", explainSourceError(err))
		default:
			logger.Info("heap profiles started", zap.Bool("go", r.cfg.Memory.Go), zap.Bool("usdt", r.cfg.Memory.USDT))
			r.memory = src
		}
	}
	if len(r.sources) > 0 {
		// Their announcements (followProcesses) keep the identities true.
		r.ids.TrustAnnouncements()
	}
	logger.Info("bpfprofiler started",
		zap.Bool("cpu", r.cfg.CPU.Enabled),
		zap.Uint64("samples_per_second", r.cfg.CPU.SamplesPerSecond),
		zap.String("unwinding", r.cfg.Unwinding.Method),
		zap.Bool("off_cpu", r.cfg.OffCPU.Enabled),
		zap.Duration("min_block", r.cfg.OffCPU.MinBlock),
		zap.Duration("report_interval", r.cfg.ReportInterval),
		zap.Uint32s("target_pids", targets),
		zap.Bool("child_pid_namespace", !pidns.IsZero()))

	ctx, cancel := context.WithCancel(context.Background())
	if err := r.startProbes(ctx, srcOpts); err != nil {
		cancel()
		r.closeAll()
		return err
	}
	if len(r.sources) == 0 && r.probes == nil && r.memory == nil && len(unsupported) > 0 {
		cancel()
		r.closeAll()
		return fmt.Errorf("nothing this kernel supports is enabled: %w", errors.Join(unsupported...))
	}
	r.cancel = cancel
	r.done = make(chan struct{})
	r.lastDrain = clock.Now()
	go r.reportLoop(ctx)
	if len(r.sources) > 0 {
		r.background.Go(r.symbols.LoadKernel)
	}
	if len(r.sources) > 0 {
		var events [2]<-chan capture.ProcessEvent
		for i, kind := range []report.Kind{report.KindCPU, report.KindOffCPU} {
			if src, ok := r.sources[kind]; ok {
				events[i] = src.NewProcesses()
			}
		}
		r.background.Go(func() { r.followProcesses(ctx, events) })
	}
	return nil
}

// resolveTargets checks that every target pid exists and returns the pids
// with their start times.
func (r *profilerReceiver) resolveTargets() ([]uint32, map[uint32]uint64, error) {
	var errs []error
	starts := make(map[uint32]uint64, len(r.cfg.Targets.PIDs))
	for _, pid := range r.cfg.Targets.PIDs {
		start, err := r.proc.StartTime(pid)
		if err != nil {
			errs = append(errs, fmt.Errorf("targets::pids: process %d does not exist: %w", pid, err))
		}
		starts[pid] = start
	}
	return r.cfg.Targets.PIDs, starts, errors.Join(errs...)
}

func (r *profilerReceiver) reportLoop(ctx context.Context) {
	defer close(r.done)
	ticker := time.NewTicker(r.cfg.ReportInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			r.report(ctx, false)
		}
	}
}

// report drains every source, builds the profiles and hands them on; final
// is the last report, at Shutdown.
func (r *profilerReceiver) report(ctx context.Context, final bool) {
	now := clock.Now()
	end := time.Unix(0, int64(clock.UnixNanos(now)))
	start := end.Add(-time.Duration(now - r.lastDrain))
	r.lastDrain = now
	// Exits announced before this drain: their samples are in it.
	exited, overflow := r.exits.take()
	lost := overflow
	if len(r.sources) > 0 {
		r.targetWatch.check(r.proc, r.settings.Logger)
	}
	var profiles []report.Profile
	for _, kind := range []report.Kind{report.KindCPU, report.KindOffCPU} {
		src, ok := r.sources[kind]
		if !ok {
			continue
		}
		stacks, st, err := src.Drain()
		r.recordSourceStats(ctx, kind, src.Mechanism(), st)
		lost = lost || st.NewProcessDrops > 0
		if err != nil {
			r.settings.Logger.Warn("drain failed", zap.String("kind", string(kind)), zap.Error(err))
			r.reportFailed(ctx, signalProfiles)
			continue
		}
		prof, ast := r.assembler.Assemble(kind, start, end, r.period(kind), stacks)
		r.telemetry.BpfprofilerProcessesSeen.Add(ctx, int64(ast.Processes))
		r.telemetry.BpfprofilerFramesUnsymbolized.Add(ctx, int64(ast.Unsymbolized))
		r.recordAttributesLost(ctx, attrLossUnnamed, uint64(ast.TraceAttributesDropped))
		r.recordGoLabelsLost(ctx, goLabelLossUndecodable, uint64(ast.GoLabelsDropped))
		if len(prof.Processes) > 0 {
			profiles = append(profiles, prof)
		}
	}
	profiles = r.joinScopes(ctx, start, end, profiles, final)
	profiles = append(profiles, r.memoryProfiles(ctx, start, end)...)
	symStats := r.symbols.Stats()
	r.recordPythonSymbolization(ctx, symStats.RuntimeUnsymbolized[capture.CPython.Name()])
	r.recordJVMSymbolization(ctx, symStats)
	r.recordV8Symbolization(ctx, symStats)
	r.recordRubySymbolization(ctx, symStats)
	r.recordPHPSymbolization(ctx, symStats)
	r.recordSymbolCache(ctx, r.symbols.CacheSizes())
	r.recordProcessReads(ctx)
	r.recordProcessContexts(ctx)
	r.forgetExited(exited, lost)
	if len(profiles) == 0 {
		return
	}
	r.writePprof(ctx, profiles)
	r.consumeProfiles(ctx, profiles)
}

func (r *profilerReceiver) period(kind report.Kind) int64 {
	if kind == report.KindCPU {
		return int64(time.Second) / int64(r.cfg.CPU.SamplesPerSecond)
	}
	return 0
}

func (r *profilerReceiver) writePprof(ctx context.Context, profiles []report.Profile) {
	if r.cfg.Pprof.Directory == "" {
		return
	}
	for _, p := range profiles {
		if _, err := pproffile.Write(r.cfg.Pprof.Directory, p); err != nil {
			r.settings.Logger.Warn("write pprof file", zap.String("pprof::directory", r.cfg.Pprof.Directory), zap.Error(err))
			r.reportFailed(ctx, signalPprof)
		}
	}
}

func (r *profilerReceiver) consumeProfiles(ctx context.Context, profiles []report.Profile) {
	next := r.profilesConsumer()
	if next == nil {
		return
	}
	pd, err := pdata.Builder{
		Scope:             pdata.Scope{Name: metadata.ScopeName, Version: r.settings.BuildInfo.Version},
		Threads:           r.cfg.threadAttributes(),
		ResourceOnSamples: r.cfg.ResourceAttributesOnSamples,
	}.Build(profiles...)
	if err != nil {
		r.settings.Logger.Warn("build profiles", zap.Error(err))
		r.reportFailed(ctx, signalProfiles)
		return
	}
	// Counted before the next consumer may change pd: one report holds the
	// cpu and off_cpu profiles, each sample type counted apart.
	byType := xreceiverhelper.ProfileSampleCountsByType(pd)
	ctx = r.profilesObs.StartProfilesOp(ctx)
	err = next.ConsumeProfiles(ctx, pd)
	r.profilesObs.EndProfilesOpBySampleType(ctx, obsFormat, byType, err)
	if err != nil {
		r.settings.Logger.Warn("next consumer refused profiles", zap.Error(err))
		r.reportFailed(ctx, signalProfiles)
	}
}

// Shutdown stops the loop, flushes what was aggregated since the last report
// and the probe records not yet delivered, and detaches everything. Safe
// without Start and when called twice.
func (r *profilerReceiver) Shutdown(ctx context.Context) error {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.background.Wait()
		r.cancel = nil
		// Probes first: the last records read link the last samples.
		if r.probes != nil {
			r.probes.stop()
		}
		r.report(ctx, true)
		if r.probes != nil {
			r.probes.flushAll(ctx)
		}
	}
	r.closeAll()
	r.telemetry.Shutdown()
	return nil
}

func (r *profilerReceiver) profilesConsumer() xconsumer.Profiles {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.profiles
}

func (r *profilerReceiver) logsConsumer() consumer.Logs {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs
}

func (r *profilerReceiver) closeAll() {
	if r.probes != nil {
		r.probes.stop()
		r.probes = nil
	}
	for kind, src := range r.sources {
		if err := src.Close(); err != nil {
			r.settings.Logger.Warn("close source", zap.String("kind", string(kind)), zap.Error(err))
		}
	}
	r.sources = nil
	if r.memory != nil {
		if err := r.memory.Close(); err != nil {
			r.settings.Logger.Warn("close heap profiles", zap.Error(err))
		}
		r.memory = nil
	}
	r.scopes.close(r.settings.Logger)
	r.scopes = nil
	if err := r.unwind.close(); err != nil {
		r.settings.Logger.Warn("close unwind tables", zap.Error(err))
	}
	r.unwind = nil
	if r.symbols != nil {
		_ = r.symbols.Close()
		r.symbols = nil
	}
}
