// Package all lists the runtimes the profiler reads the frames of; the
// unwinder and the symbolizer reach them only through it.
package all

import (
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/cpython"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/hotspot"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/php"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes/ruby"
	v8 "github.com/bpfprofiler/bpfprofiler/internal/runtimes/v8"
)

// Runtimes are the runtimes, in the order files are tested for them.
var Runtimes = []*runtimes.Runtime{cpython.Runtime, hotspot.Runtime, v8.Runtime, ruby.Runtime, php.Runtime}

// ByName returns the runtime named name, or nil.
func ByName(name string) *runtimes.Runtime {
	for _, rt := range Runtimes {
		if rt.Name == name {
			return rt
		}
	}
	return nil
}
