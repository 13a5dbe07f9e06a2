//go:build linux

package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"fmt"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/sampler"
)

func openKernelSource(cfg *Config, kind report.Kind, targets []uint32) (stackSource, error) {
	switch kind {
	case report.KindCPU:
		s, err := sampler.Open(sampler.Options{SamplesPerSecond: cfg.CPU.SamplesPerSecond, TargetPIDs: targets})
		if err != nil {
			return nil, err
		}
		return cpuSource{s}, nil
	default:
		return nil, fmt.Errorf("profile kind %q is not supported", kind)
	}
}

// cpuSource adapts the CPU sampler to a stackSource.
type cpuSource struct{ s *sampler.Sampler }

func (c cpuSource) Drain() ([]assemble.Stack, sourceStats, error) {
	raw, st, err := c.s.Drain()
	stats := sourceStats{
		Recorded: st.Recorded,
		Lost: map[string]uint64{
			"map_full":      st.LostMapFull,
			"user_stack":    st.UserStackErrors,
			"kernel_stack":  st.KernelStackErrors,
			"stack_missing": st.StackMissing,
		},
	}
	stacks := make([]assemble.Stack, 0, len(raw))
	for _, s := range raw {
		stacks = append(stacks, assemble.Stack{
			PID: s.PID, TID: s.TID, Comm: s.Comm,
			User: s.UserStack, Kernel: s.KernelStack,
			Value: int64(s.Count),
		})
	}
	return stacks, stats, err
}

func (c cpuSource) Close() error { return c.s.Close() }
