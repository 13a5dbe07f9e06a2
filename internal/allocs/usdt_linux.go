//go:build linux

package allocs

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capabilities"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// usdtFile is one file's uprobes on its otel_memory sites; err: not
// probed (no such probes, notes refused, attach failed).
type usdtFile struct {
	links []link.Link
	err   error
}

// haveAttachCookies reports whether uprobe programs can read their attach
// cookie (Linux 5.15), which names a site's argument fetch; a variable so
// tests can take the other path.
var haveAttachCookies = func() bool {
	return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) == nil
}

// goOnlyObjects are the allocation programs without the otel_memory ones
// (which read their attach cookie: they do not load before Linux 5.15).
type goOnlyObjects struct {
	bpf.AllocMaps
	GoFree        *ebpf.Program `ebpf:"go_free"`
	GoFreeSpecial *ebpf.Program `ebpf:"go_free_special"`
	GoGcCycle     *ebpf.Program `ebpf:"go_gc_cycle"`
	GoMallocP0    *ebpf.Program `ebpf:"go_malloc_p0"`
	GoMallocP1    *ebpf.Program `ebpf:"go_malloc_p1"`
	AllocExec     *ebpf.Program `ebpf:"alloc_exec"`
}

// loadObjects loads spec's maps and programs into m.objs, the otel_memory
// programs only when m.usdt.
func (m *Manager) loadObjects(spec *ebpf.CollectionSpec) error {
	if m.usdt {
		return spec.LoadAndAssign(&m.objs, nil)
	}
	for _, name := range []string{bpf.AllocMapUsdtCountdown, bpf.AllocMapUsdtLive, bpf.AllocMapUsdtSpecs} {
		spec.Maps[name].MaxEntries = 1 // unused: no kernel memory for them
	}
	var o goOnlyObjects
	if err := spec.LoadAndAssign(&o, nil); err != nil {
		return err
	}
	m.objs.AllocMaps = o.AllocMaps
	p := &m.objs.AllocPrograms
	p.GoFree, p.GoFreeSpecial, p.GoGcCycle, p.GoMallocP0, p.GoMallocP1 = o.GoFree, o.GoFreeSpecial, o.GoGcCycle, o.GoMallocP0, o.GoMallocP1
	p.AllocExec = o.AllocExec
	return nil
}

// inspectUSDT probes the otel_memory sites of each file process pid maps
// executable, once per file: the uprobes serve every process mapping it.
func (m *Manager) inspectUSDT(pid uint32, maps []procfs.Map) {
	for _, mp := range maps {
		if !mp.Executable() || !mp.FileBacked() {
			continue
		}
		id := fileID{dev: uint64(mp.DevMajor)<<32 | uint64(mp.DevMinor), inode: mp.Inode}
		m.mu.Lock()
		_, seen := m.usdtFiles[id]
		m.mu.Unlock()
		if seen {
			continue
		}
		path := strings.TrimSuffix(mp.Path, " (deleted)")
		f, err := procfs.Within(m.deadline, m.opts.Proc.RootPath(pid, path),
			func() (*os.File, error) { return m.opts.Proc.OpenMappedFile(pid, mp) }, func(f *os.File) { f.Close() })
		if err != nil {
			continue // gone, or stuck: another process may map it later
		}
		uf := m.probeUSDT(f, path)
		f.Close()
		m.mu.Lock()
		m.usdtFiles[id] = uf
		m.mu.Unlock()
	}
}

// probeUSDT attaches usdt_alloc and usdt_free at the otel_memory sites
// of file f.
func (m *Manager) probeUSDT(f *os.File, path string) (uf *usdtFile) {
	uf = &usdtFile{}
	defer func() {
		if r := recover(); r != nil { // a crafted file (the process's to choose)
			uf = &usdtFile{err: fmt.Errorf("malformed file: %v", r)}
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		uf.err = err
		return uf
	}
	sites, err := usdtSites(ef)
	if err == nil {
		var ex *link.Executable
		if ex, err = link.OpenExecutable(m.opts.Proc.FDPath(f)); err == nil {
			err = m.attachUSDT(ex, sites, uf)
		}
	}
	if err != nil {
		for _, l := range uf.links {
			_ = l.Close()
		}
		uf.links, uf.err = nil, err
		if !errors.Is(err, ErrNoAllocProbe) {
			m.mu.Lock()
			m.stats.Refused++
			m.mu.Unlock()
			m.opts.Logger.Warn("otel_memory probes not used", zap.String("file", path), zap.Error(capabilities.Explain(err, capabilities.SysAdmin)))
		}
		return uf
	}
	m.mu.Lock()
	m.stats.USDTFiles++
	m.mu.Unlock()
	m.opts.Logger.Info("otel_memory allocation profiles", zap.String("file", path), zap.Int("sites", len(sites)))
	return uf
}

func (m *Manager) attachUSDT(ex *link.Executable, sites []usdtSite, uf *usdtFile) error {
	for _, s := range sites {
		cookie, err := m.specs.cookie(s.args)
		if err != nil {
			return err
		}
		name, prog := USDTFree, m.objs.UsdtFree
		if s.alloc {
			name, prog = USDTAlloc, m.objs.UsdtAlloc
		}
		l, err := ex.Uprobe(name, prog, &link.UprobeOptions{Address: s.offset, RefCtrOffset: s.refCtr, Cookie: cookie})
		if err != nil {
			return fmt.Errorf("attach %s at %#x: %w", name, s.offset, err)
		}
		uf.links = append(uf.links, l)
	}
	return nil
}
