// Package identity resolves who a process is: the resource attributes of the
// data contract, shared by profiles and probe logs. Results are cached by
// pid and start time, so a reused pid never inherits a dead process's name.
package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Resource attribute keys of the data contract.
const (
	AttrProcessPID     = "process.pid"
	AttrExecutableName = "process.executable.name"
	AttrExecutablePath = "process.executable.path"
	AttrHostName       = "host.name"
	AttrServiceName    = "service.name"
)

// Resolver resolves and caches process identities.
type Resolver struct {
	proc     procfs.FS
	hostName string

	mu    sync.Mutex
	cache map[uint32]cached
}

type cached struct {
	startTime uint64
	identity  report.Identity
}

// NewResolver returns a Resolver reading proc and naming the host hostName.
func NewResolver(proc procfs.FS, hostName string) *Resolver {
	return &Resolver{proc: proc, hostName: hostName, cache: map[uint32]cached{}}
}

// ErrGone reports a process that no longer exists.
var ErrGone = errors.New("process is gone")

// Resolve returns the identity of pid. For a process that has exited and is
// not cached it returns ErrGone together with the minimal identity it can
// still give (the pid and host), so callers keep the samples.
func (r *Resolver) Resolve(pid uint32) (report.Identity, error) {
	start, err := r.proc.StartTime(pid)
	if err != nil {
		r.mu.Lock()
		c, ok := r.cache[pid]
		r.mu.Unlock()
		if ok {
			return c.identity, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return r.minimal(pid), fmt.Errorf("identity of pid %d: %w", pid, ErrGone)
		}
		return r.minimal(pid), fmt.Errorf("identity of pid %d: %w", pid, err)
	}
	r.mu.Lock()
	c, ok := r.cache[pid]
	r.mu.Unlock()
	if ok && c.startTime == start {
		return c.identity, nil
	}
	id := r.read(pid)
	r.mu.Lock()
	r.cache[pid] = cached{startTime: start, identity: id}
	r.mu.Unlock()
	return id, nil
}

// Prune drops cached processes that no longer exist (or whose pid now belongs
// to a newer process) and returns their pids.
func (r *Resolver) Prune() []uint32 {
	r.mu.Lock()
	pids := make([]uint32, 0, len(r.cache))
	for pid := range r.cache {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	var gone []uint32
	for _, pid := range pids {
		start, err := r.proc.StartTime(pid)
		r.mu.Lock()
		if c, ok := r.cache[pid]; ok && (err != nil || c.startTime != start) {
			delete(r.cache, pid)
			gone = append(gone, pid)
		}
		r.mu.Unlock()
	}
	return gone
}

func (r *Resolver) minimal(pid uint32) report.Identity {
	return report.Identity{PID: pid, Attributes: map[string]any{
		AttrProcessPID: int64(pid),
		AttrHostName:   r.hostName,
	}}
}

func (r *Resolver) read(pid uint32) report.Identity {
	id := r.minimal(pid)
	if exe, err := r.proc.Exe(pid); err == nil && exe != "" {
		id.ExePath = exe
		id.ExeName = filepath.Base(exe)
	} else if comm, err := r.proc.Comm(pid); err == nil {
		// Kernel threads have no executable; their comm names them.
		id.ExeName = comm
	}
	if id.ExePath != "" {
		id.Attributes[AttrExecutablePath] = id.ExePath
	}
	if id.ExeName != "" {
		id.Attributes[AttrExecutableName] = id.ExeName
		id.Attributes[AttrServiceName] = id.ExeName
	}
	return id
}
