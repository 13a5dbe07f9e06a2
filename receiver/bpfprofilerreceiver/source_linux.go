//go:build linux

package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"fmt"
	"os"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/offcpu"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/sampler"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
)

func openKernelSource(cfg *Config, kind report.Kind, opts sourceOptions) (stackSource, error) {
	switch kind {
	case report.KindCPU:
		s, err := sampler.Open(sampler.Options{
			SamplesPerSecond: cfg.CPU.SamplesPerSecond,
			TargetPIDs:       opts.targets,
			PIDNamespace:     opts.pidns,
			ReportInterval:   cfg.ReportInterval,
		})
		if err != nil {
			return nil, err
		}
		return cpuSource{drainSource{s}, s}, nil
	case report.KindOffCPU:
		t, err := offcpu.Open(offcpu.Options{
			MinBlock:     cfg.OffCPU.MinBlock,
			TargetPIDs:   opts.targets,
			ExcludePIDs:  []uint32{uint32(os.Getpid())},
			PIDNamespace: opts.pidns,
			Mechanism:    offcpu.Mechanism(cfg.OffCPU.Mechanism),
		})
		if err != nil {
			return nil, err
		}
		return offCPUSource{drainSource{t}, t}, nil
	default:
		return nil, fmt.Errorf("profile kind %q is not supported", kind)
	}
}

// drainer is what the CPU sampler and the off-CPU tracer have in common.
type drainer interface {
	Drain() ([]stackdrain.Sample, capture.Stats, error)
	Close() error
}

// drainSource adapts a drainer to a stackSource.
type drainSource struct{ d drainer }

func (c drainSource) Drain() ([]assemble.Stack, sourceStats, error) {
	raw, st, err := c.d.Drain()
	stacks := make([]assemble.Stack, 0, len(raw))
	for _, s := range raw {
		stacks = append(stacks, assemble.Stack{
			PID: s.PID, TID: s.TID, Comm: s.Comm,
			User: s.UserStack, Kernel: s.KernelStack,
			UserLoss: s.UserLoss, KernelLoss: s.KernelLoss,
			Value: int64(s.Value),
		})
	}
	return stacks, st, err
}

func (c drainSource) Close() error { return c.d.Close() }

// cpuSource also announces processes the moment they are first sampled.
type cpuSource struct {
	drainSource
	s *sampler.Sampler
}

func (c cpuSource) NewProcesses() <-chan capture.ProcessEvent { return c.s.NewProcesses() }

func (c cpuSource) Mechanism() string { return mechPerfEvent }

// offCPUSource announces processes too, and says which mechanism runs.
type offCPUSource struct {
	drainSource
	t *offcpu.Tracer
}

func (o offCPUSource) NewProcesses() <-chan capture.ProcessEvent { return o.t.NewProcesses() }

func (o offCPUSource) Mechanism() string { return string(o.t.Mechanism()) }
