// Package identity resolves who a process is: the resource attributes of the
// data contract, shared by profiles and probe logs. Results are cached by
// pid and start time, so a reused pid never inherits a dead process's name.
// Where the kernel announces every process's start and exit
// (TrustAnnouncements), a cached identity is used without a read of the
// process until its pid is announced again.
//
// Kubernetes and container attributes come without the Kubernetes API: the
// cgroup path gives the container id, runtime and pod uid; the runtime's
// files on the node give pod, namespace and container names; the downward
// API environment names the collector's own pod.
package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Options configures a Resolver.
type Options struct {
	Proc procfs.FS
	// HostName names the node (host.name); empty: the downward API's
	// NODE_NAME, else the hostname.
	HostName string
	// HostRoot is where the node's /run and /var/lib are visible
	// (kubernetes::host_root); "/" when empty.
	HostRoot string
	// Env reads the collector's environment (downward API); os.Getenv when nil.
	Env func(string) string
	// SelfPID is the collector's pid as Proc sees it; os.Getpid() when 0.
	SelfPID uint32
	// ProcessContexts reads the contexts SDKs publish (OTEP 4719): their
	// resource attributes are applied to their processes' identities.
	ProcessContexts bool
	Now             func() time.Time // time.Now when nil
	Logger          *zap.Logger      // zap.NewNop() when nil
}

// Resolver resolves and caches process identities.
type Resolver struct {
	proc     procfs.FS
	hostName string
	names    *RuntimeNames
	self     self
	contexts *contextReader // nil: not read
	logger   *zap.Logger

	mu        sync.Mutex
	cache     map[uint32]cached
	announced bool // see TrustAnnouncements
}

type cached struct {
	startTime uint64
	identity  report.Identity
	// check: the pid was announced since this was read, so it may be
	// another process's now; its start time is compared at the next
	// Resolve.
	check bool
}

// NewResolver returns a Resolver reading proc and naming the host hostName,
// with the defaults of Options for everything else.
func NewResolver(proc procfs.FS, hostName string) *Resolver {
	return New(Options{Proc: proc, HostName: hostName})
}

// New returns a Resolver configured by o. It reads the collector's own
// cgroup once, to know which processes share its pod.
func New(o Options) *Resolver {
	if o.Env == nil {
		o.Env = os.Getenv
	}
	if o.SelfPID == 0 {
		o.SelfPID = uint32(os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	downward := DownwardFromEnv(o.Env)
	if o.HostName == "" {
		o.HostName = downward.NodeName
	}
	if o.HostName == "" {
		o.HostName, _ = os.Hostname()
	}
	r := &Resolver{
		proc:     o.Proc,
		hostName: o.HostName,
		names:    NewRuntimeNames(o.HostRoot, o.Logger),
		logger:   o.Logger,
		cache:    map[uint32]cached{},
	}
	r.self = r.readSelf(o.SelfPID, downward)
	if o.ProcessContexts {
		r.contexts = newContextReader(o.Proc, o.Now)
	}
	return r
}

func (r *Resolver) readSelf(pid uint32, d Downward) self {
	s := self{names: d, podUID: strings.ToLower(d.PodUID)}
	lines, err := r.proc.Cgroup(pid)
	if err != nil {
		r.logger.Debug("Cannot read the collector's own cgroup", zap.Error(err))
		return s
	}
	c := CgroupFromLines(lines)
	if c.PodUID != "" {
		s.podUID = c.PodUID
	}
	s.containerID = c.ContainerID
	return s
}

// ErrGone reports a process that no longer exists.
var ErrGone = errors.New("process is gone")

// Resolve returns the identity of pid. For a process that has exited and is
// not cached it returns ErrGone together with the minimal identity it can
// still give (the pid and host), so callers keep the samples.
func (r *Resolver) Resolve(pid uint32) (report.Identity, error) {
	r.mu.Lock()
	c, ok := r.cache[pid]
	trusted := ok && r.announced && !c.check
	r.mu.Unlock()
	if trusted {
		return r.withContext(pid, c.identity), nil
	}
	start, err := r.proc.StartTime(pid)
	if err != nil {
		r.mu.Lock()
		c, ok := r.cache[pid]
		r.mu.Unlock()
		if ok {
			return r.withContext(pid, c.identity), nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return r.minimal(pid), fmt.Errorf("identity of pid %d: %w", pid, ErrGone)
		}
		return r.minimal(pid), fmt.Errorf("identity of pid %d: %w", pid, err)
	}
	r.mu.Lock()
	c, ok = r.cache[pid]
	if ok && c.startTime == start {
		c.check = false
		r.cache[pid] = c
	}
	r.mu.Unlock()
	if ok && c.startTime == start {
		return r.withContext(pid, c.identity), nil
	}
	if ok && r.contexts != nil {
		r.contexts.forget(pid) // another process now
	}
	id := r.read(pid)
	r.mu.Lock()
	r.cache[pid] = cached{startTime: start, identity: id}
	r.mu.Unlock()
	return r.withContext(pid, id), nil
}

// withContext applies pid's published context to id, when contexts are read.
func (r *Resolver) withContext(pid uint32, id report.Identity) report.Identity {
	if r.contexts == nil {
		return id
	}
	return r.contexts.apply(pid, id)
}

// ThreadAttributeKeys returns the key map of pid's OpenTelemetry thread
// context records (OTEP 4947), from its process context; nil: none known.
func (r *Resolver) ThreadAttributeKeys(pid uint32) []string {
	if r.contexts == nil {
		return nil
	}
	return r.contexts.threadKeys(pid)
}

// ContextStats returns the counts of process contexts read (zero when they
// are not read).
func (r *Resolver) ContextStats() ContextStats {
	if r.contexts == nil {
		return ContextStats{}
	}
	return r.contexts.Stats()
}

// TrustAnnouncements says the caller calls Announce for every process that
// starts (at its first sample) and ForgetExited or Prune for those that
// exit: Resolve then uses a cached identity without reading the process's
// start time again. Until it is called every Resolve reads it.
func (r *Resolver) TrustAnnouncements() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.announced = true
}

// Announce says pid was announced as a process: a cached identity of the
// pid is checked against the process's start time at its next Resolve.
func (r *Resolver) Announce(pid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cache[pid]; ok {
		c.check = true
		r.cache[pid] = c
	}
}

// Known reports whether the identity of pid is cached.
func (r *Resolver) Known(pid uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.cache[pid]
	return ok
}

// Forget drops what is cached about pid: it exec'ed a new program (same
// pid and start time, another executable).
func (r *Resolver) Forget(pid uint32) {
	r.mu.Lock()
	delete(r.cache, pid)
	r.mu.Unlock()
	if r.contexts != nil {
		r.contexts.forget(pid)
	}
}

// ForgetExited drops what is cached about those of pids that no longer exist
// (or whose pid now belongs to a newer process), announced as exited, and
// returns them; the files it reads grow with pids, not with the processes
// cached.
func (r *Resolver) ForgetExited(pids []uint32) []uint32 {
	gone := r.forgetGone(pids)
	if len(gone) > 0 {
		r.forgetRuntimeNames()
	}
	return gone
}

// Prune drops cached processes that no longer exist (or whose pid now belongs
// to a newer process) and returns their pids. Runtime names of containers no
// cached process belongs to are dropped too.
func (r *Resolver) Prune() []uint32 {
	r.mu.Lock()
	pids := make([]uint32, 0, len(r.cache))
	for pid := range r.cache {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	gone := r.forgetGone(pids)
	r.forgetRuntimeNames()
	return gone
}

// forgetGone drops the cached identities of those of pids whose process no
// longer exists, and returns them. A pid not cached costs no read.
func (r *Resolver) forgetGone(pids []uint32) []uint32 {
	var gone []uint32
	for _, pid := range pids {
		if !r.Known(pid) {
			continue
		}
		start, err := r.proc.StartTime(pid)
		r.mu.Lock()
		if c, ok := r.cache[pid]; ok && (err != nil || c.startTime != start) {
			delete(r.cache, pid)
			gone = append(gone, pid)
		}
		r.mu.Unlock()
	}
	if r.contexts != nil {
		for _, pid := range gone {
			r.contexts.forget(pid)
		}
	}
	return gone
}

// forgetRuntimeNames drops the runtime names of containers no cached process
// belongs to.
func (r *Resolver) forgetRuntimeNames() {
	r.mu.Lock()
	live := map[string]bool{}
	for _, c := range r.cache {
		if id, ok := c.identity.Attributes[attrkey.ContainerID].(string); ok {
			live[id] = true
		}
	}
	r.mu.Unlock()
	r.names.Forget(func(id string) bool { return live[id] })
}

// RuntimeFileErrors returns how many container runtime files could not be
// read or parsed (their pod names were left out).
func (r *Resolver) RuntimeFileErrors() uint64 {
	return r.names.Errors()
}

func (r *Resolver) minimal(pid uint32) report.Identity {
	return report.Identity{PID: pid, Attributes: map[string]any{
		attrkey.ProcessPID: int64(pid),
		attrkey.HostName:   r.hostName,
	}}
}

func (r *Resolver) read(pid uint32) report.Identity {
	id := r.minimal(pid)
	if kthread, err := r.proc.KernelThread(pid); err == nil && kthread {
		// One service for every kernel thread: their names (in thread.name)
		// change with their work (kworker/0:1-events, -mm_percpu_wq, ...).
		id.Attributes[attrkey.ServiceName] = attrkey.KernelServiceName
		return id
	}
	if exe, err := r.proc.Exe(pid); err == nil && exe != "" {
		id.ExePath = exe
		id.ExeName = filepath.Base(exe)
	}
	if strings.HasPrefix(id.ExeName, "memfd:") {
		// Run from an anonymous file, whose name changes with every run
		// (memfd:sealed-91173221a7ea, and so does the comm the kernel
		// derives from it): the name it was started as names it.
		id.ExeName = ""
		if argv0, err := r.proc.Argv0(pid); err == nil {
			id.ExeName = filepath.Base(argv0)
		}
	}
	if id.ExeName == "" || id.ExeName == "." {
		if comm, err := r.proc.Comm(pid); err == nil && comm != "" {
			id.ExeName = comm
		}
	}
	if id.ExePath != "" {
		id.Attributes[attrkey.ProcessExecutablePath] = id.ExePath
	}
	if id.ExeName != "" {
		id.Attributes[attrkey.ProcessExecutableName] = id.ExeName
	}
	unit := r.addContainer(pid, id.Attributes)
	id.Attributes[attrkey.ServiceName] = serviceName(id.Attributes, unit, id.ExeName)
	if id.Attributes[attrkey.ServiceName] == "" {
		delete(id.Attributes, attrkey.ServiceName)
	}
	return id
}

// addContainer adds the container and Kubernetes attributes of pid and
// returns its systemd unit, if any.
func (r *Resolver) addContainer(pid uint32, attrs map[string]any) string {
	lines, err := r.proc.Cgroup(pid)
	if err != nil {
		// Gone meanwhile, or no cgroup file (non-Linux fake roots): no
		// container attributes.
		return ""
	}
	c := CgroupFromLines(lines)
	podUID := c.PodUID
	if c.ContainerID != "" {
		attrs[attrkey.ContainerID] = c.ContainerID
		names, runtime := r.names.Lookup(c.ContainerID, c.Runtime)
		if runtime != "" {
			attrs[attrkey.ContainerRuntimeName] = runtime
		}
		if podUID == "" {
			// A cgroup namespace can hide the pod segment; the runtime knows.
			podUID = strings.ToLower(names.PodUID)
		}
		setIfMissing(attrs, attrkey.K8sPodName, names.PodName)
		setIfMissing(attrs, attrkey.K8sNamespaceName, names.Namespace)
		setIfMissing(attrs, attrkey.K8sContainerName, names.ContainerName)
	}
	if podUID != "" {
		attrs[attrkey.K8sPodUID] = podUID
	}
	r.self.apply(attrs, podUID, c.ContainerID)
	return c.SystemdUnit
}

// serviceName is the container name, else the systemd unit without its
// ".service" suffix, else the executable name.
func serviceName(attrs map[string]any, unit, exeName string) string {
	if name, ok := attrs[attrkey.K8sContainerName].(string); ok && name != "" {
		return name
	}
	if u := strings.TrimSuffix(unit, ".service"); u != "" {
		return u
	}
	return exeName
}
