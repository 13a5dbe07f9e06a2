package symbolize

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// fileKey identifies a mapped file across processes.
type fileKey struct {
	devMajor, devMinor uint32
	inode              uint64
	path               string
}

// keyOf is the key of the file of mapping m.
func keyOf(m procfs.Map) fileKey {
	return fileKey{devMajor: m.DevMajor, devMinor: m.DevMinor, inode: m.Inode, path: m.Path}
}

// fileEntry is a cached parse result; err is cached too so a bad file is
// read once.
type fileEntry struct {
	ef  *elfFile
	err error
}

// cachedFrames are the frames of one lookup address of a process; Address
// is set to the sampled address on use.
type cachedFrames struct {
	frames   []report.Frame
	resolved bool
}

// process is what is cached about one process.
type process struct {
	maps       []procfs.Map
	mappings   []*report.Mapping // parallel to maps, built lazily
	mapsErr    error
	readAt     time.Time
	perfMap    *perfMap
	perfMapErr error
	perfMapAt  time.Time
	// frames caches what addresses of file-backed mappings resolved to,
	// keyed by lookup address; dropped when the maps change.
	frames map[uint64]cachedFrames
	// debugStalled is set when opening one of its debug files timed out:
	// no more are looked for (attachDebugFile).
	debugStalled bool
	// runtimes is the state of its runtimes (internal/runtimes), by name,
	// once a frame of one was symbolized.
	runtimes map[string]*runtimeProcess
}

// User symbolizes a user stack of process pid, leaf first in and out. An
// address may expand into several frames (inlined calls, innermost first);
// the address of a Go ABI wrapper gives none (elideABIWrappers).
func (s *Symbolizer) User(pid uint32, addrs []uint64) []report.Frame {
	return s.user(pid, addrs, true)
}

// UserExited is User for a process that has exited (or whose /proc can no
// longer be read): it uses what was read of the process before (Prefetch,
// an earlier stack) and reads nothing, so the stacks of an exec storm of
// short-lived processes cost no failed reads at the report. Frames of a
// process never read keep their addresses only.
func (s *Symbolizer) UserExited(pid uint32, addrs []uint64) []report.Frame {
	return s.user(pid, addrs, false)
}

// UserSkipping is User (UserExited when exited) leaving the addresses i
// with skip[i] set unresolved: native frames whose runtime frame takes their
// place (the JIT code of a walked runtime) cost no lookup.
func (s *Symbolizer) UserSkipping(pid uint32, addrs []uint64, skip []bool, exited bool) []report.Frame {
	return s.userSkipping(pid, addrs, skip, !exited)
}

// user symbolizes a user stack of pid; live allows reading its files.
func (s *Symbolizer) user(pid uint32, addrs []uint64, live bool) []report.Frame {
	return s.userSkipping(pid, addrs, nil, live)
}

func (s *Symbolizer) userSkipping(pid uint32, addrs []uint64, skip []bool, live bool) []report.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeReleasePages()
	p, ok := s.procs.get(pid)
	if !ok && !live {
		frames := make([]report.Frame, len(addrs))
		for i, addr := range addrs {
			frames[i] = report.Frame{Address: addr, Type: report.FrameNative}
			s.count(false)
		}
		return frames
	}
	if !ok {
		p = s.process(pid)
	}
	refreshed := !live // a process that exited has no maps to read again
	frames := make([]report.Frame, 0, len(addrs))
	for i, addr := range addrs {
		if i < len(skip) && skip[i] {
			frames = append(frames, report.Frame{Address: addr, Type: report.FrameNative})
			continue
		}
		la := lookupAddr(i, addr)
		if c, ok := p.frames[la]; ok {
			for _, f := range c.frames {
				f.Address = addr
				frames = append(frames, f)
			}
			s.count(c.resolved)
			continue
		}
		idx := p.find(la)
		if idx < 0 && !refreshed && s.now().Sub(p.readAt) >= s.refreshInterval {
			// A miss: the process may have mapped something new.
			refreshed = true
			s.readMaps(pid, p)
			idx = p.find(la)
		}
		n := len(frames)
		frames = s.userFrames(frames, pid, p, idx, addr, la, live)
		if idx >= 0 && p.maps[idx].FileBacked() {
			s.cacheFrames(p, la, frames[n:])
		}
	}
	return elideABIWrappers(frames)
}

// cacheFrames remembers the frames of lookup address la of p. The cache of
// one process and the total over all processes are bounded; reaching a
// bound drops the process's cache, or all of them.
func (s *Symbolizer) cacheFrames(p *process, la uint64, frames []report.Frame) {
	if len(p.frames) >= s.maxProcessFrames {
		s.dropFrames(p)
	}
	if s.cachedFrames >= s.maxCachedFrames {
		s.procs.each(func(_ uint32, q *process) { s.dropFrames(q) })
	}
	if p.frames == nil {
		p.frames = make(map[uint64]cachedFrames)
	}
	p.frames[la] = cachedFrames{frames: slices.Clone(frames), resolved: len(frames) > 0 && frames[0].Function != ""}
	s.cachedFrames++
}

// dropFrames forgets the cached frames of p.
func (s *Symbolizer) dropFrames(p *process) {
	s.cachedFrames -= len(p.frames)
	p.frames = nil
}

// process returns the cached process pid, reading its maps on first use.
func (s *Symbolizer) process(pid uint32) *process {
	if p, ok := s.procs.get(pid); ok {
		return p
	}
	p := &process{}
	s.readMaps(pid, p)
	s.procs.add(pid, p)
	return p
}

// readMaps (re-)reads the executable maps of pid (stacks point into code),
// keeping the Mapping values and the cached frames of unchanged mappings so
// callers can compare them by pointer.
func (s *Symbolizer) readMaps(pid uint32, p *process) {
	s.stats.MapRefreshes++
	p.readAt = s.now()
	exec, err := s.proc.ExecMaps(pid)
	if err != nil {
		if p.mapsErr == nil && s.once.first(fmt.Sprintf("maps:%d", pid)) {
			s.log.Debug("cannot read process maps", zap.Uint32("pid", pid), zap.Error(err))
		}
		p.mapsErr = err
		return
	}
	p.mapsErr = nil
	old := make(map[procfs.Map]*report.Mapping, len(p.maps))
	for i, m := range p.maps {
		if p.mappings[i] != nil {
			old[m] = p.mappings[i]
		}
	}
	sort.Slice(exec, func(i, j int) bool { return exec[i].Start < exec[j].Start })
	if !slices.Equal(p.maps, exec) {
		s.dropChangedFrames(p, exec)
	}
	p.maps = exec
	p.mappings = make([]*report.Mapping, len(exec))
	for i, m := range exec {
		p.mappings[i] = old[m]
	}
}

// dropChangedFrames forgets the cached frames of p whose address is in a
// mapping that is not among maps, its new mappings: a runtime that maps and
// unmaps JIT code changes its maps often, its files' frames stay.
func (s *Symbolizer) dropChangedFrames(p *process, maps []procfs.Map) {
	kept := make(map[procfs.Map]bool, len(maps))
	for _, m := range maps {
		kept[m] = true
	}
	for la := range p.frames {
		if i := p.find(la); i < 0 || !kept[p.maps[i]] {
			delete(p.frames, la)
			s.cachedFrames--
		}
	}
}

// find returns the index of the mapping containing addr, or -1.
func (p *process) find(addr uint64) int {
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > addr })
	if i < len(p.maps) && p.maps[i].Contains(addr) {
		return i
	}
	return -1
}

// userFrames appends the frames of one address (la is the lookup address);
// live allows reading the process's files (see UserExited).
func (s *Symbolizer) userFrames(out []report.Frame, pid uint32, p *process, idx int, addr, la uint64, live bool) []report.Frame {
	if idx < 0 {
		// No mapping: JIT code whose mapping vanished, or garbage.
		name := s.jitName(pid, p, la, live)
		s.count(name != "")
		return append(out, report.Frame{Address: addr, Function: name, Type: report.FrameNative})
	}
	m := p.maps[idx]
	if isVDSO(m) {
		name := s.vdso.name(m.End-m.Start, la-m.Start)
		s.count(name != "")
		return append(out, report.Frame{Address: addr, Function: name, Type: report.FrameNative, Mapping: s.mapping(p, idx, nil)})
	}
	if !m.FileBacked() {
		if name := s.entryCode(pid, p, m); name != "" {
			s.count(true)
			return append(out, report.Frame{Address: addr, Function: name, Type: report.FrameJIT, Mapping: s.mapping(p, idx, nil)})
		}
		if fs, ok := s.codeFrames(pid, p, addr, la); ok {
			mapping := s.mapping(p, idx, nil)
			for i := range fs {
				fs[i].Mapping = mapping
			}
			return append(out, fs...)
		}
		name := ""
		if m.Path == "" || strings.HasPrefix(m.Path, "[anon") {
			name = s.jitName(pid, p, la, live)
		}
		s.count(name != "")
		return append(out, report.Frame{Address: addr, Function: name, Type: report.FrameJIT, Mapping: s.mapping(p, idx, nil)})
	}
	var ef *elfFile
	key := keyOf(m)
	if live {
		ef, key = s.elf(pid, m)
	} else if e, ok := s.files.get(key); ok {
		ef = e.ef
	}
	mapping := s.mapping(p, idx, ef)
	unresolved := report.Frame{Address: addr, Type: report.FrameNative, Mapping: mapping}
	if ef == nil {
		s.count(false)
		return append(out, unresolved)
	}
	vaddr, ok := ef.vaddr(la - m.Start + m.Offset)
	if !ok {
		s.count(false)
		return append(out, unresolved)
	}
	gfs, name := s.resolveFile(ef, key, vaddr)
	if len(gfs) > 0 {
		s.count(true)
		for _, g := range gfs {
			out = append(out, report.Frame{Address: addr, Function: g.function, File: g.file, Line: g.line,
				Type: report.FrameGo, Inlined: g.inlined, Mapping: mapping})
		}
		return out
	}
	s.count(name != "")
	unresolved.Function = demangleName(name)
	return append(out, unresolved)
}

// mapping returns the shared Mapping value of maps[idx] of p.
func (s *Symbolizer) mapping(p *process, idx int, ef *elfFile) *report.Mapping {
	if mp := p.mappings[idx]; mp != nil {
		return mp
	}
	m := p.maps[idx]
	mp := &report.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path}
	if ef != nil {
		mp.BuildIDGNU, mp.BuildIDGo = ef.buildIDGNU, ef.buildIDGo
	}
	p.mappings[idx] = mp
	return mp
}

// elf returns the parsed file of mapping m of pid and its cache key, or nil
// when it cannot be read (logged once per file).
func (s *Symbolizer) elf(pid uint32, m procfs.Map) (*elfFile, fileKey) {
	key := keyOf(m)
	if e, ok := s.files.get(key); ok {
		return e.ef, key
	}
	ef, err := s.openELF(pid, m)
	if errors.Is(err, procfs.ErrMappingGone) {
		// The process exited or unmapped it since its stack was taken:
		// nothing is known of the file, which the next process mapping
		// it opens (an error cached would leave it unnamed in every
		// process while cached).
		return nil, key
	}
	s.files.add(key, &fileEntry{ef: ef, err: err})
	if err != nil {
		if reason := procfs.RefusalReason(err); reason != "" {
			s.countRefused(reason)
		} else {
			s.stats.FileErrors++
		}
		if s.once.first("file:" + m.Path) {
			s.log.Info("cannot symbolize file", zap.String("file", m.Path), zap.Uint32("pid", pid),
				zap.String("reason", procfs.RefusalReason(err)),
				zap.Error(capabilities.Explain(err, capabilities.SysPtrace, capabilities.DACReadSearch)))
		}
		return nil, key
	}
	s.files.setWeight(key, ef.heapCost())
	return ef, key
}

// openELF opens and parses the file of mapping m of pid, and attaches its
// separate debug file when it has no symbol table of its own (see
// attachDebugFile). The file is the
// process's to choose: procfs.OpenMappedFile refuses a file that is not the
// mapped one (device and inode), not regular, or on FUSE or a network file
// system, where a page fault of the mapping could block forever; the open
// itself runs under the deadline (a lookup on FUSE can block too).
func (s *Symbolizer) openELF(pid uint32, m procfs.Map) (*elfFile, error) {
	file := strings.TrimSuffix(m.Path, " (deleted)")
	name := s.proc.RootPath(pid, file)
	f, err := procfs.Within(s.deadline, name, func() (*os.File, error) { return s.proc.OpenMappedFile(pid, m) }, closeFile)
	if err != nil {
		return nil, err
	}
	mf, err := mapOpenFile(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	var ef *elfFile
	if ferr := withFaultPanic(func() { ef, err = parseELF(mf.data) }); ferr != nil {
		err = fmt.Errorf("malformed ELF: %w", ferr)
	}
	if err != nil {
		mf.close()
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	ef.mapped = mf
	mf.releasePages()
	if ef.wantsDebugFile() {
		s.attachDebugFile(pid, file, ef)
	}
	return ef, nil
}

func closeFile(f *os.File) { f.Close() }

// resolveFile resolves vaddr of ef: Go frames, or else the symbol name. A
// panic on a crafted file, or a fault on a file truncated since it was
// mapped, leaves the address unresolved (logged once per file).
func (s *Symbolizer) resolveFile(ef *elfFile, key fileKey, vaddr uint64) (gfs []goFrame, name string) {
	if r, ok := ef.resolved[vaddr]; ok {
		return r.gfs, r.name
	}
	built := ef.symsBuilt
	err := withFaultPanic(func() {
		if ef.gotab != nil {
			if gfs = ef.gotab.lookup(vaddr); len(gfs) > 0 {
				return
			}
		}
		name = ef.symbol(vaddr)
	})
	if err != nil {
		// Unmap the file and remember the error: it is not read again
		// while cached.
		s.files.remove(key)
		s.files.add(key, &fileEntry{err: err})
		s.stats.FileErrors++
		if s.once.first("filepanic:" + key.path) {
			s.log.Warn("malformed or truncated file", zap.String("file", key.path), zap.Error(err))
		}
		return nil, ""
	}
	if ef.resolved == nil || len(ef.resolved) >= maxResolvedPerFile {
		ef.resolved = make(map[uint64]resolvedAddr)
	}
	ef.resolved[vaddr] = resolvedAddr{gfs: gfs, name: name}
	if !built && ef.symsBuilt {
		ef.releasePages() // building the table read all its symbols
	} else {
		s.touch(ef)
	}
	if n := len(ef.resolved); !built && ef.symsBuilt || n&(n-1) == 0 {
		s.files.setWeight(key, ef.heapCost())
	}
	return gfs, name
}

// countRefused counts a refused file under its reason.
func (s *Symbolizer) countRefused(reason string) {
	if s.stats.FilesRefused == nil {
		s.stats.FilesRefused = make(map[string]uint64)
	}
	s.stats.FilesRefused[reason]++
}

// Prefetch reads the maps of pid and opens the files its code is mapped
// from, so its stacks still resolve after it exits: a short-lived process
// (a compiler, a test binary) is usually gone by the time its samples are
// drained. Files already cached are not read again.
func (s *Symbolizer) Prefetch(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs.get(pid)
	if ok {
		s.readMaps(pid, p)
	} else {
		p = s.process(pid)
	}
	for _, m := range p.maps {
		if m.FileBacked() {
			s.elf(pid, m)
		}
	}
}
