package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/offcpu"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/sampler"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// kernelSources opens the kernel side of every signal: stacks of one
// profile kind (the CPU sampler, the off-CPU tracer) and the probes' scopes.
// The receiver opens nothing from the kernel but through it; tests replace
// it with fakes.
type kernelSources struct {
	stacks func(cfg *Config, kind report.Kind, opts sourceOptions) (stackSource, error)
	probes func(specs []probes.Spec, opts sourceOptions) (probeSource, error)
	memory func(cfg *Config, opts sourceOptions) (memorySource, error)
}

// realKernel opens the BPF sources.
var realKernel = kernelSources{stacks: openKernelStacks, probes: openKernelProbes, memory: openKernelMemory}

// sourceOptions is what every kernel source needs besides its own config.
type sourceOptions struct {
	targets []uint32            // pids as the collector sees them
	pidns   procfs.PIDNamespace // the collector's pid namespace; zero: host
	proc    procfs.FS
	logger  *zap.Logger
	unwind  *sharedTables // nil: frame pointers only
	// openScopes is the map of open probe scopes (internal/scopemap) the
	// probes write and the profile sources read; nil: none.
	openScopes *scopemap.Maps
}

// sharedTables are the unwind tables the CPU sampler and the off-CPU tracer
// share, opened by the first source that asks for them.
type sharedTables struct {
	proc   procfs.FS
	memory uint64 // bytes the tables may take
	// noThreadContexts: processes' OpenTelemetry thread contexts are not
	// located (trace_context::enabled false).
	noThreadContexts bool
	// noGoLabels: Go processes' labels are not read (go_labels::enabled false).
	noGoLabels bool
	// goroutines: Go processes' goroutines are read, labels or not (a
	// probe links samples: a Go function's scope is its goroutine's).
	goroutines bool
	once       sync.Once
	tables     *unwinder.Tables
	err        error
}

// get opens the tables the first time; nil receiver: none.
func (s *sharedTables) get() (*unwinder.Tables, error) {
	if s == nil {
		return nil, nil
	}
	s.once.Do(func() {
		s.tables, s.err = unwinder.OpenTables(s.proc, s.memory)
		if s.err == nil && s.noThreadContexts {
			s.tables.IgnoreThreadContexts()
		}
		if s.err == nil && s.noGoLabels {
			s.tables.IgnoreGoLabels()
		}
		if s.err == nil && s.goroutines {
			s.tables.ReadGoroutines()
		}
	})
	return s.tables, s.err
}

// close closes the tables if they were opened; the sources come first.
func (s *sharedTables) close() error {
	if s == nil || s.tables == nil {
		return nil
	}
	err := s.tables.Close()
	s.tables = nil
	return err
}

// stackSource is the kernel side of one profile kind, seen from here: it
// hands over what was aggregated since the previous drain.
type stackSource interface {
	Drain() ([]capture.RawStack, capture.Stats, error)
	Close() error
	// Mechanism names how the kernel records the samples (the mechanism
	// attribute of samples_recorded).
	Mechanism() string
	// NewProcesses announces, soon after their first sample, processes the
	// source has not seen before, and processes that exec'ed.
	NewProcesses() <-chan capture.ProcessEvent
}

// probeSource is the kernel side of the probes (probes.Manager): Run hands
// over scopes as they are read.
type probeSource interface {
	Run(ctx context.Context, deliver func([]capture.RawScope)) error
	Stats() probes.Stats
	Close() error
}

// openKernelStacks opens the CPU sampler or the off-CPU tracer, which hand
// over capture values as they are.
func openKernelStacks(cfg *Config, kind report.Kind, opts sourceOptions) (stackSource, error) {
	if err := kernelcheck.Check(); err != nil {
		return nil, err
	}
	tables, err := opts.unwind.get()
	if err != nil {
		return nil, fmt.Errorf("unwinding::method %s: %w", cfg.Unwinding.Method, err)
	}
	switch kind {
	case report.KindCPU:
		src, err := sampler.Open(sampler.Options{
			SamplesPerSecond: cfg.CPU.SamplesPerSecond,
			TargetPIDs:       opts.targets,
			PIDNamespace:     opts.pidns,
			ReportInterval:   cfg.ReportInterval,
			Unwind:           tables,
			OpenScopes:       opts.openScopes,
		})
		if errors.Is(err, sampler.ErrRateAboveLimit) {
			return nil, fmt.Errorf("cpu::samples_per_second: %w", err)
		}
		return src, err
	case report.KindOffCPU:
		src, err := offcpu.Open(offcpu.Options{
			MinBlock:     cfg.OffCPU.MinBlock,
			TargetPIDs:   opts.targets,
			ExcludePIDs:  []uint32{uint32(os.Getpid())},
			PIDNamespace: opts.pidns,
			Mechanism:    offcpu.Mechanism(cfg.OffCPU.Mechanism),
			Unwind:       tables,
			OpenScopes:   opts.openScopes,
		})
		if errors.Is(err, offcpu.ErrMechanismUnsupported) {
			return nil, fmt.Errorf("off_cpu::mechanism: %w", err)
		}
		return src, err
	default:
		return nil, fmt.Errorf("profile kind %q is not supported", kind)
	}
}

// openKernelProbes attaches the probes; scopes carry pids as the
// collector's /proc knows them, like the profiles.
func openKernelProbes(specs []probes.Spec, opts sourceOptions) (probeSource, error) {
	if err := kernelcheck.Check(); err != nil {
		return nil, err
	}
	return probes.Open(specs, probes.Options{Proc: opts.proc, Logger: opts.logger, PIDNamespace: opts.pidns, OpenScopes: opts.openScopes})
}
