package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"fmt"
	"os"

	"github.com/bpfprofiler/bpfprofiler/internal/offcpu"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/sampler"
)

// openKernelSource opens the kernel side of one profile kind: the CPU
// sampler or the off-CPU tracer, which hand over capture values as they are.
func openKernelSource(cfg *Config, kind report.Kind, opts sourceOptions) (stackSource, error) {
	switch kind {
	case report.KindCPU:
		return sampler.Open(sampler.Options{
			SamplesPerSecond: cfg.CPU.SamplesPerSecond,
			TargetPIDs:       opts.targets,
			PIDNamespace:     opts.pidns,
			ReportInterval:   cfg.ReportInterval,
		})
	case report.KindOffCPU:
		return offcpu.Open(offcpu.Options{
			MinBlock:     cfg.OffCPU.MinBlock,
			TargetPIDs:   opts.targets,
			ExcludePIDs:  []uint32{uint32(os.Getpid())},
			PIDNamespace: opts.pidns,
			Mechanism:    offcpu.Mechanism(cfg.OffCPU.Mechanism),
		})
	default:
		return nil, fmt.Errorf("profile kind %q is not supported", kind)
	}
}
