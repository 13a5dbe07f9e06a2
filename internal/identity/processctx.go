package identity

import (
	"bufio"
	"errors"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/processctx"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// How often a process is looked at again for a published context (OTEP
// 4719): an SDK publishes at its start, which may come well after the
// process's (a Java agent's), and may update it. A process with a context
// has its 32-byte header read at most every contextPoll; one without has
// its maps scanned again after contextRescanFirst, then at doubling
// intervals up to contextRescanMax: only processes that have samples are
// looked at (Resolve), and each costs a bounded number of scans an hour.
const (
	contextPoll        = 10 * time.Second
	contextRescanFirst = 10 * time.Second
	contextRescanMax   = 10 * time.Minute
	contextReadTimeout = time.Second
)

// Reasons a process context was not taken (ContextStats.Failed keys).
const (
	ContextUnreadable = "unreadable"   // maps or memory could not be read, or not in time
	ContextMalformed  = "malformed"    // no signature, a bad size or payload
	ContextVersion    = "version"      // a version this reader does not know
	ContextUpdating   = "updating"     // changed under every read
	ContextGone       = "process_gone" // exited meanwhile
)

// ContextReasons lists every reason a context was not taken.
var ContextReasons = []string{ContextUnreadable, ContextMalformed, ContextVersion, ContextUpdating, ContextGone}

// ContextStats count the process contexts read.
type ContextStats struct {
	Read   uint64            // publications read and applied
	Failed map[string]uint64 // by reason
}

// contextState is what is known of one process's published context.
type contextState struct {
	addr      uint64 // the mapping's start; 0: none found
	published uint64 // the publication applied (processctx.Context.PublishedAt)
	ctx       processctx.Context
	scans     int       // scans that found none, for the backoff
	next      time.Time // when to look again
}

// contextReader reads processes' contexts under a deadline: the payload
// pointer may lead into a file mapping whose reads block.
type contextReader struct {
	proc     procfs.FS
	deadline *procfs.Deadline
	now      func() time.Time

	// mu serializes the reads: Resolve's callers (one per report kind)
	// may ask for one process at once.
	mu     sync.Mutex
	states map[uint32]*contextState
	stats  ContextStats
}

func newContextReader(proc procfs.FS, now func() time.Time) *contextReader {
	return &contextReader{proc: proc, deadline: procfs.NewDeadline(contextReadTimeout, 4), now: now,
		states: map[uint32]*contextState{}, stats: ContextStats{Failed: map[string]uint64{}}}
}

// apply returns id, the identity of pid as inferred, with its published
// context applied, looking at the publication again when it is time.
func (c *contextReader) apply(pid uint32, id report.Identity) report.Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.states[pid]
	if s == nil {
		s = &contextState{}
		c.states[pid] = s
	}
	c.refresh(pid, s)
	return withContext(id, s.ctx)
}

// threadKeys returns the key map of pid's thread context records, as its
// last publication read gives it.
func (c *contextReader) threadKeys(pid uint32) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.states[pid]; s != nil {
		keys, _ := s.ctx.Attributes[threadctx.KeyMapAttribute].([]string)
		return keys
	}
	return nil
}

// forget drops what is known of pid's context: it exited or exec'ed.
func (c *contextReader) forget(pid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.states, pid)
}

// refresh brings s up to date with pid's publication, if it is time to
// look. c.mu is held.
func (c *contextReader) refresh(pid uint32, s *contextState) {
	now := c.now()
	if now.Before(s.next) {
		return
	}
	if s.addr != 0 {
		s.next = now.Add(contextPoll)
		published, err := c.published(pid, s.addr)
		if err == nil && published == s.published {
			return
		}
		if err != nil && !errors.Is(err, processctx.ErrSignature) && !errors.Is(err, processctx.ErrVersion) {
			c.fail(err)
			return
		}
		// Unmapped or replaced: look for the mapping again.
		if err != nil {
			s.addr = 0
		}
	}
	if s.addr == 0 {
		addr, err := c.find(pid)
		if err != nil || addr == 0 {
			if err != nil {
				c.fail(err)
			}
			s.scans++
			*s = contextState{scans: s.scans, next: now.Add(min(contextRescanFirst<<min(s.scans-1, 16), contextRescanMax))}
			return
		}
		s.addr, s.scans = addr, 0
		s.next = now.Add(contextPoll)
	}
	ctx, err := c.read(pid, s.addr)
	if err != nil {
		c.fail(err)
		return
	}
	s.ctx, s.published = ctx, ctx.PublishedAt
	c.stats.Read++
}

// find scans pid's maps for the context's mapping (0: none).
func (c *contextReader) find(pid uint32) (uint64, error) {
	name := c.proc.Path(pid, "maps")
	return procfs.Within(c.deadline, name, func() (uint64, error) {
		f, err := os.Open(name)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 4096), 64<<10)
		for sc.Scan() {
			if !strings.Contains(sc.Text(), "OTEL_CTX") {
				continue
			}
			m, err := procfs.ParseMaps(strings.NewReader(sc.Text()))
			if err != nil {
				continue
			}
			if addr, ok := processctx.Find(m); ok {
				return addr, nil
			}
		}
		return 0, sc.Err()
	}, nil)
}

func (c *contextReader) published(pid uint32, addr uint64) (uint64, error) {
	return withMem(c, pid, func(mem *os.File) (uint64, error) { return processctx.Published(mem, addr) })
}

func (c *contextReader) read(pid uint32, addr uint64) (processctx.Context, error) {
	return withMem(c, pid, func(mem *os.File) (processctx.Context, error) { return processctx.Read(mem, addr) })
}

func withMem[T any](c *contextReader, pid uint32, fn func(*os.File) (T, error)) (T, error) {
	name := c.proc.Path(pid, "mem")
	return procfs.Within(c.deadline, name, func() (T, error) {
		mem, err := os.Open(name)
		if err != nil {
			var zero T
			return zero, err
		}
		defer mem.Close()
		return fn(mem)
	}, nil)
}

func (c *contextReader) fail(err error) {
	reason := ContextUnreadable
	switch {
	case errors.Is(err, os.ErrNotExist):
		reason = ContextGone
	case errors.Is(err, processctx.ErrVersion):
		reason = ContextVersion
	case errors.Is(err, processctx.ErrUpdating):
		reason = ContextUpdating
	case errors.Is(err, processctx.ErrSignature), errors.Is(err, processctx.ErrSize), errors.Is(err, processctx.ErrPayload):
		reason = ContextMalformed
	}
	c.stats.Failed[reason]++ // c.mu is held (refresh)
}

func (c *contextReader) Stats() ContextStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ContextStats{Read: c.stats.Read, Failed: maps.Clone(c.stats.Failed)}
}

// withContext returns id with the SDK's resource attributes of ctx: they
// win over what was inferred (service.name), except where this node
// observes the fact itself (the process, host, container and Kubernetes
// attributes, which an SDK in a container sees otherwise: its pid is the
// namespace's).
func withContext(id report.Identity, ctx processctx.Context) report.Identity {
	if len(ctx.Resource) == 0 {
		return id
	}
	attrs := maps.Clone(id.Attributes)
	for k, v := range ctx.Resource {
		if _, ours := attrs[k]; ours && observed(k) {
			continue
		}
		attrs[k] = v
	}
	id.Attributes = attrs
	return id
}

func observed(key string) bool {
	for _, prefix := range []string{"process.", "host.", "container.", "k8s."} {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}
