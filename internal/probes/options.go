package probes

import (
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// Options configures a Manager.
type Options struct {
	Proc   procfs.FS   // zero value: the host's /proc
	Logger *zap.Logger // nil: no logging
	// RescanInterval is how often every process's maps are scanned again
	// for matching files (libraries loaded with dlopen, lost exec events).
	// 0 means 30s; negative disables the rescan.
	RescanInterval time.Duration
	// PIDNamespace, when set, is the collector's own (child) pid namespace:
	// Records and exec events carry pids and tids as seen from it (those
	// Proc resolves there), and processes outside it are not reported. The
	// zero value reports host ids.
	PIDNamespace procfs.PIDNamespace
	// OpenScopes are the maps of open scopes shared with the samplers
	// (internal/scopemap); nil: no probe links samples, whatever its
	// Spec.LinkSamples.
	OpenScopes *scopemap.Maps
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.RescanInterval == 0 {
		o.RescanInterval = 30 * time.Second
	}
	return o
}
