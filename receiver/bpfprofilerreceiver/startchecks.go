package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/identity"
	"github.com/bpfprofiler/bpfprofiler/internal/kernelcheck"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// checkPprofDirectory creates pprof::directory and checks that a file can be
// created in it, so that an unusable directory fails Start instead of every
// report.
func checkPprofDirectory(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pprof::directory: cannot create %q: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".bpfprofiler-write-check-*")
	if err != nil {
		return fmt.Errorf("pprof::directory: cannot write files in %q: %w", dir, err)
	}
	name := f.Name()
	err = errors.Join(f.Close(), os.Remove(name))
	if err != nil {
		return fmt.Errorf("pprof::directory: cannot remove a file from %q: %w", dir, err)
	}
	return nil
}

// explainSourceError names the capabilities the collector lacks when a
// profile source failed to load or attach for want of permission, and
// kernel lockdown when the verifier refused a helper it withdraws.
func explainSourceError(err error) error {
	return kernelcheck.Explain(capabilities.Explain(err, capabilities.BPF, capabilities.Perfmon))
}

// warnMissingRuntimeDirs warns when kubernetes::host_root shows none of the
// container runtimes' state directories: pod, namespace and container names
// would then be missing without any other sign (e.g. host_root: /host with the
// DaemonSet's hostPath mounts left out).
func warnMissingRuntimeDirs(logger *zap.Logger, hostRoot string) {
	dirs := identity.RuntimeStateDirs(hostRoot)
	var denied error
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		switch {
		case err == nil && st.IsDir():
			return
		case err != nil && !errors.Is(err, fs.ErrNotExist) && denied == nil:
			denied = err
		}
	}
	if denied != nil {
		logger.Warn("cannot read the container runtime state below kubernetes::host_root: pod, namespace and container names will be missing",
			zap.String("kubernetes::host_root", hostRoot),
			zap.Error(capabilities.Explain(denied, capabilities.DACReadSearch)))
		return
	}
	logger.Warn("kubernetes::host_root holds none of the container runtime state directories: pod, namespace and container names will be missing (expected on a host without containerd, CRI-O or docker)",
		zap.String("kubernetes::host_root", hostRoot), zap.Strings("looked_for", dirs))
}

// targetWatch notices when every process of targets::pids has exited: the
// receiver keeps running, with nothing left to profile.
type targetWatch struct {
	starts map[uint32]uint64 // start time of each target pid at Start
	warned bool
}

// check warns, once, when none of the target processes is alive (a pid now
// held by a process started later counts as gone).
func (w *targetWatch) check(proc procfs.FS, logger *zap.Logger) {
	if w.warned || len(w.starts) == 0 {
		return
	}
	pids := make([]uint32, 0, len(w.starts))
	for pid, start := range w.starts {
		if now, err := proc.StartTime(pid); err == nil && now == start {
			return
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	w.warned = true
	logger.Warn("every process of targets::pids has exited: the receiver keeps running but has nothing to profile",
		zap.Uint32s("targets::pids", pids))
}
