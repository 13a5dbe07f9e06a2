// Package symbolize turns kernel and user program counters into frames:
// kernel addresses through /proc/kallsyms, user addresses through the
// process's memory maps and the mapped ELF files (.symtab/.dynsym, the
// .symtab of separate debug files, Go .gopclntab with inlined frames, GNU
// and Go build ids) or, for JIT code,
// through /tmp/perf-<pid>.map files; the frames of runtimes (CPython's code
// object and instruction) through internal/runtimes, from /proc/<pid>/mem. Parsed files are cached by file identity
// and every cache is bounded.
package symbolize

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Options configures a Symbolizer. Zero values select the defaults.
type Options struct {
	Proc         procfs.FS
	KallsymsPath string // default "/proc/kallsyms"
	MaxFiles     int    // bound on cached parsed ELF files (LRU), default 256
	// MaxFileBytes bounds the estimated Go heap held by cached ELF files
	// (symbol indexes; names, pclntabs and string tables stay in the
	// files' read-only mappings), default 32 MiB.
	MaxFileBytes int64
	MaxProcesses int // bound on cached process maps (LRU), default 4096
	// MaxPerfMapBytes bounds the size of a perf map that is read; larger
	// ones are refused. Default 8 MiB. The perf maps of all processes
	// together hold at most about four times as much.
	MaxPerfMapBytes int64
	// DebugDirs are the directories of separate debug files (with their
	// .build-id/ trees), as the profiled processes see them: they are
	// looked up inside each process's root. Nil selects
	// []string{DefaultDebugDir}; an empty, non-nil slice looks only next to
	// the binaries (through .gnu_debuglink).
	DebugDirs []string
	Logger    *zap.Logger
}

// Stats are cumulative counters of a Symbolizer.
type Stats struct {
	FramesResolved     uint64 // addresses resolved to a function name
	FramesUnsymbolized uint64 // addresses left without a function name
	MapRefreshes       uint64 // reads of /proc/<pid>/maps
	FileErrors         uint64 // files (ELF, debug files, kallsyms, maps) that could not be read or parsed
	// DebugFiles counts separate debug files opened for function names.
	DebugFiles uint64
	// FilesRefused counts files a process controls (perf maps, mapped ELF
	// files) that were refused, by reason (procfs.Reason*: too_large,
	// not_regular, symlink, owner, replaced, remote_fs, timeout, stuck).
	FilesRefused map[string]uint64
	// RuntimeFrames counts the frames of runtimes (internal/runtimes)
	// named, by runtime; RuntimeUnsymbolized those left without a name, by
	// runtime and reason (Runtime*: no_interpreter, memory, bad_code).
	RuntimeFrames       map[string]uint64
	RuntimeUnsymbolized map[string]map[string]uint64
}

// Defaults of Options and internal intervals.
const (
	DefaultKallsymsPath = "/proc/kallsyms"
	DefaultMaxFiles     = 256
	DefaultMaxFileBytes = 32 << 20
	DefaultMaxProcesses = 4096
	DefaultMaxPerfMap   = 8 << 20

	// Bounds on the resolved frames cached per process and in total
	// (roughly 200 bytes each).
	defaultMaxProcessFrames = 4096
	defaultMaxCachedFrames  = 32768

	defaultRefreshInterval = time.Second      // minimum time between re-reads of maps and perf maps on a miss
	kernelRefreshInterval  = 30 * time.Second // minimum time between re-reads of kallsyms on a miss
	// pageReleaseInterval is how often the pages of mapped files are
	// dropped from the resident set, so that it holds the pages touched in
	// the last interval only, not every page ever touched.
	pageReleaseInterval = 10 * time.Second
	// fileIdleTTL is how long a file no lookup used stays cached: on a node
	// that runs ever new binaries (deploys, builds) the cache holds those
	// in use, not the last MaxFiles ever run. The unwinder keeps a file's
	// table as long after its last process.
	fileIdleTTL = 2 * time.Minute
	// releaseAfterLookups is how many lookups of uncached addresses in
	// mapped files release the pages they read (at most ~4 MiB then).
	releaseAfterLookups = 64
	logOnceSize         = 4096

	// fileTimeout bounds the wait for an open or a read of a file a
	// process controls; maxStuckFiles bounds those that never returned.
	fileTimeout   = time.Second
	maxStuckFiles = 64
	// perfMapBudget is how many times MaxPerfMapBytes the perf maps of all
	// processes may hold together.
	perfMapBudget = 4
)

// Symbolizer resolves addresses to frames. It is safe for concurrent use;
// calls are serialized by a mutex.
type Symbolizer struct {
	mu    sync.Mutex
	proc  procfs.FS
	kpath string
	log   *zap.Logger
	// debugDirs are where separate debug files are looked for.
	debugDirs []string
	now       func() time.Time
	// refreshInterval bounds how often maps and perf maps are re-read on
	// misses, kernelRefresh how often kallsyms is (it is large).
	refreshInterval time.Duration
	kernelRefresh   time.Duration

	kernel       *kallsyms
	kernelLoaded time.Time
	kernelErr    error

	files    *lru[fileKey, *fileEntry]
	deadline *procfs.Deadline // opens and reads of files processes control
	// maxPerfMap bounds one perf map, perfMapBytes is the heap held by
	// all loaded ones.
	maxPerfMap   int64
	perfMapBytes int64
	// readPerfMap reads a perf map (loadPerfMap); tests replace it.
	readPerfMap func(pid uint32, file string, st procfs.Status, prev *perfMap) (*perfMap, error)
	// openInRoot opens a file inside the root of a process (debug files);
	// tests replace it.
	openInRoot func(pid uint32, path string) (*os.File, error)
	procs      *lru[uint32, *process]
	vdso       vdsoImage // the kernel's vDSO, read on first use
	once       *onceSet
	stats      Stats

	pagesReleased time.Time
	// touched are the files lookups read since their pages were last
	// released, lookups how many reads that was (touch).
	touched          []*elfFile
	lookups          int
	cachedFrames     int // entries of all processes' frame caches
	maxProcessFrames int
	maxCachedFrames  int
}

// New returns a Symbolizer configured by opts.
func New(opts Options) *Symbolizer {
	if opts.KallsymsPath == "" {
		opts.KallsymsPath = DefaultKallsymsPath
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.MaxPerfMapBytes <= 0 {
		opts.MaxPerfMapBytes = DefaultMaxPerfMap
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{DefaultDebugDir}
	}
	s := &Symbolizer{
		deadline:         procfs.NewDeadline(fileTimeout, maxStuckFiles),
		maxPerfMap:       opts.MaxPerfMapBytes,
		proc:             opts.Proc,
		kpath:            opts.KallsymsPath,
		debugDirs:        slices.Clone(opts.DebugDirs),
		log:              opts.Logger,
		now:              time.Now,
		refreshInterval:  defaultRefreshInterval,
		kernelRefresh:    kernelRefreshInterval,
		once:             newOnceSet(logOnceSize),
		maxProcessFrames: defaultMaxProcessFrames,
		maxCachedFrames:  defaultMaxCachedFrames,
	}
	s.files = newLRU(opts.MaxFiles, func(_ fileKey, e *fileEntry) {
		if e.ef != nil {
			_ = e.ef.close()
		}
	})
	s.openInRoot = opts.Proc.OpenInRoot
	s.readPerfMap = func(pid uint32, file string, st procfs.Status, prev *perfMap) (*perfMap, error) {
		return loadPerfMap(s.proc, pid, file, st, prev, s.maxPerfMap)
	}
	s.files.maxWeight = opts.MaxFileBytes
	s.files.now = func() time.Time { return s.now() }
	s.procs = newLRU(opts.MaxProcesses, func(_ uint32, p *process) {
		s.dropFrames(p)
		s.dropPerfMap(p)
		dropRuntimes(p)
	})
	return s
}

// Stats returns the cumulative counters.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.FilesRefused = maps.Clone(s.stats.FilesRefused)
	st.RuntimeFrames = maps.Clone(s.stats.RuntimeFrames)
	st.RuntimeUnsymbolized = cloneRuntimeUnsymbolized(s.stats.RuntimeUnsymbolized)
	return st
}

// CacheSizes are what the symbolizer's caches hold now, each within its
// bound (Options): gauges, where Stats are counters.
type CacheSizes struct {
	Files        int   // files whose symbols are cached (mapped)
	FileBytes    int64 // their weight, the estimate Options.MaxFileBytes bounds
	PerfMapBytes int64 // the heap of the loaded perf maps
	Processes    int   // processes whose mappings are cached
	Frames       int   // resolved frames cached, of all processes
}

// CacheSizes returns what the caches hold now.
func (s *Symbolizer) CacheSizes() CacheSizes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return CacheSizes{
		Files:        s.files.len(),
		FileBytes:    s.files.weight,
		PerfMapBytes: s.perfMapBytes,
		Processes:    s.procs.len(),
		Frames:       s.cachedFrames,
	}
}

// ForgetProcess drops what is cached about pid, its maps and resolved
// frames (call it when the process exits). Parsed files stay cached: other
// processes may map them.
func (s *Symbolizer) ForgetProcess(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs.remove(pid)
}

// Close releases the caches and unmaps every cached file. The Symbolizer
// stays usable.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files.clear()
	s.procs.clear()
	s.kernel = nil
	return nil
}

// maybeReleasePages drops the resident pages of the cached files read since
// their last release, every pageReleaseInterval. They stay in the page
// cache. A file whose runtime interpreter reads it (which the symbolizer
// does not see) counts as read. Files no lookup used for fileIdleTTL are
// closed then too.
func (s *Symbolizer) maybeReleasePages() {
	now := s.now()
	if now.Sub(s.pagesReleased) < pageReleaseInterval {
		return
	}
	s.pagesReleased = now
	s.files.expireBefore(now.Add(-fileIdleTTL))
	s.files.each(func(_ fileKey, e *fileEntry) {
		if e.ef != nil && (e.ef.touched || len(e.ef.interps) > 0) {
			e.ef.releasePages()
		}
	})
}

// touch notes a lookup that read the pages of ef. Every
// releaseAfterLookups lookups the pages of the files read are released:
// a read maps up to the kernel's fault-around (64 KiB) of a file, so the
// first report of a node, which reads hundreds of functions' names in a
// dozen large files (node, libjvm, the collector itself), would otherwise
// hold tens of MiB of them until the next pageReleaseInterval.
func (s *Symbolizer) touch(ef *elfFile) {
	if !ef.touched {
		ef.touched = true
		s.touched = append(s.touched, ef)
	}
	if s.lookups++; s.lookups >= releaseAfterLookups {
		for _, t := range s.touched {
			t.releasePages()
		}
		clear(s.touched)
		s.touched, s.lookups = s.touched[:0], 0
	}
}

// lookupAddr is the address used to find the function of stack entry i:
// every entry but the leaf is a return address, which may point just past
// the call (into the next function or line), so use the byte before it.
func lookupAddr(i int, addr uint64) uint64 {
	if i > 0 && addr > 0 {
		return addr - 1
	}
	return addr
}

// LoadKernel reads the kernel symbols now instead of at the first kernel
// stack, so that cost falls at start-up, not into a report. The file is
// parsed without holding the symbolizer's lock, so user-space lookups and
// prefetches go on meanwhile.
func (s *Symbolizer) LoadKernel() {
	s.mu.Lock()
	loaded := !s.kernelLoaded.IsZero()
	s.mu.Unlock()
	if loaded {
		return
	}
	ks, err := readKallsyms(s.kpath)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kernelLoaded.IsZero() {
		s.setKernel(ks, err)
	}
}

// Kernel symbolizes a kernel stack, leaf first in and out.
func (s *Symbolizer) Kernel(addrs []uint64) []report.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kernelLoaded.IsZero() || s.kernel == nil && s.now().Sub(s.kernelLoaded) >= s.kernelRefresh {
		s.loadKernel()
	}
	frames := make([]report.Frame, len(addrs))
	for i, addr := range addrs {
		frames[i] = report.Frame{Address: addr, Type: report.FrameKernel}
		la := lookupAddr(i, addr)
		name, m, ok := s.kernelLookup(la)
		if !ok && s.now().Sub(s.kernelLoaded) >= s.kernelRefresh {
			// Possibly a module loaded since the last read.
			s.loadKernel()
			name, m, ok = s.kernelLookup(la)
		}
		frames[i].Function, frames[i].Mapping = name, m
		s.count(ok && name != "")
	}
	return frames
}

func (s *Symbolizer) kernelLookup(addr uint64) (string, *report.Mapping, bool) {
	if s.kernel == nil {
		return "", nil, false
	}
	return s.kernel.lookup(addr)
}

func (s *Symbolizer) loadKernel() {
	ks, err := readKallsyms(s.kpath)
	s.setKernel(ks, err)
}

func readKallsyms(path string) (*kallsyms, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	ks, err := parseKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return ks, nil
}

// setKernel installs what readKallsyms returned; s.mu is held.
func (s *Symbolizer) setKernel(ks *kallsyms, err error) {
	s.kernelLoaded = s.now()
	if err == nil {
		s.kernel, s.kernelErr = ks, nil
		if len(ks.syms) == 0 && s.once.first("kallsyms-empty:"+s.kpath) {
			s.log.Warn("kallsyms has no usable symbols (addresses hidden?); kernel frames stay unsymbolized",
				zap.String("file", s.kpath))
		}
		return
	}
	if s.kernelErr == nil {
		s.stats.FileErrors++
		s.log.Warn("cannot load kernel symbols", zap.Error(err))
	}
	s.kernelErr = err
}

func (s *Symbolizer) count(resolved bool) {
	if resolved {
		s.stats.FramesResolved++
	} else {
		s.stats.FramesUnsymbolized++
	}
}
