//go:build !linux

package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"errors"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func openKernelSource(*Config, report.Kind, sourceOptions) (stackSource, error) {
	return nil, errors.New("the bpfprofiler receiver is only supported on Linux")
}
