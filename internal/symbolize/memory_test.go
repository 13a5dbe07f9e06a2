package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// realBinaries returns large ELF files of this machine that a busy build
// host maps: the Go toolchain, perf, node, libc, libstdc++.
func realBinaries() []string {
	globs := []string{
		"/usr/local/go/pkg/tool/linux_amd64/*",
		"/usr/local/go/bin/*",
		"/usr/bin/perf",
		"/usr/bin/node",
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	}
	var out []string
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		out = append(out, m...)
	}
	return out
}

// hostFixture is a fake /proc whose processes each map one real binary
// (root is a link to "/"), with addresses spread over its code.
type hostFixture struct {
	fs     procfs.FS
	pids   []uint32
	stacks map[uint32][][]uint64
	files  int
}

const (
	fixtureStackDepth = 16
	fixtureAddrs      = 2048 // addresses per binary
)

func newHostFixture(tb testing.TB) *hostFixture {
	tb.Helper()
	h := &hostFixture{fs: procfs.FS{Root: tb.TempDir()}, stacks: map[uint32][][]uint64{}}
	for i, bin := range realBinaries() {
		pid := uint32(1000 + i)
		maps, addrs, ok := fixtureMaps(bin)
		if !ok {
			continue
		}
		dir := h.fs.Path(pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(bin, filepath.Join(dir, "exe")); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
			tb.Fatal(err)
		}
		for len(addrs) > 0 {
			n := min(fixtureStackDepth, len(addrs))
			h.stacks[pid] = append(h.stacks[pid], addrs[:n])
			addrs = addrs[n:]
		}
		h.pids = append(h.pids, pid)
		h.files++
	}
	if h.files == 0 {
		tb.Skip("no real binaries found")
	}
	return h
}

// fixtureMaps returns a maps line for each executable PT_LOAD of bin, as the
// loader would map them at base, and addresses spread over them.
func fixtureMaps(bin string) (string, []uint64, bool) {
	f, err := elf.Open(bin)
	if err != nil {
		return "", nil, false
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(bin, &st); err != nil {
		return "", nil, false
	}
	base := uint64(0)
	if f.Type == elf.ET_DYN {
		base = 0x7f0000000000
	}
	var b strings.Builder
	var addrs []uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || p.Filesz == 0 {
			continue
		}
		start := (base + p.Vaddr) &^ 0xfff
		end := (base + p.Vaddr + p.Filesz + 0xfff) &^ 0xfff
		// The device and inode are the file's, as the kernel shows them.
		fmt.Fprintf(&b, "%x-%x r-xp %08x %x:%x %d %s\n", start, end, p.Off&^0xfff, unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino, bin)
		step := max(p.Filesz/fixtureAddrs, 1)
		for a := base + p.Vaddr; a < base+p.Vaddr+p.Filesz && len(addrs) < fixtureAddrs; a += step {
			addrs = append(addrs, a)
		}
	}
	return b.String(), addrs, len(addrs) > 0
}

// memSnapshot is the heap in use after a GC and the resident set.
type memSnapshot struct {
	heap, rssAnon, rssFile uint64
}

func snapshot() memSnapshot {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSnapshot{heap: ms.HeapInuse}
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "RssAnon":
				s.rssAnon = kb << 10
			case "RssFile":
				s.rssFile = kb << 10
			}
		}
	}
	return s
}

func mb(a, b uint64) float64 { return (float64(a) - float64(b)) / (1 << 20) }

// BenchmarkSymbolizeManyBinaries symbolizes addresses spread over the code
// of many large real binaries, through the public API, and reports the heap
// held afterwards (after GC) and the time per lookup, cold and warm. Run:
//
//	go test -run '^$' -bench ManyBinaries -benchtime 1x ./internal/symbolize/
func BenchmarkSymbolizeManyBinaries(b *testing.B) {
	h := newHostFixture(b)
	var lookups int
	for _, pid := range h.pids {
		for _, st := range h.stacks[pid] {
			lookups += len(st)
		}
	}
	before := snapshot()
	var heldHeap, peakAlloc, rssAnon, rssFile, rssFileReleased, cold, warm float64
	for range b.N {
		s := New(Options{Proc: h.fs})
		var peak uint64
		t0 := time.Now()
		for _, pid := range h.pids {
			for _, st := range h.stacks[pid] {
				s.User(pid, st)
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		t1 := time.Now()
		for _, pid := range h.pids {
			for _, st := range h.stacks[pid] {
				s.User(pid, st)
			}
		}
		t2 := time.Now()
		after := snapshot()
		heldHeap += mb(after.heap, before.heap)
		peakAlloc += mb(peak, before.heap)
		rssAnon += mb(after.rssAnon, before.rssAnon)
		rssFile += mb(after.rssFile, before.rssFile)
		cold += float64(t1.Sub(t0).Nanoseconds()) / float64(lookups)
		warm += float64(t2.Sub(t1).Nanoseconds()) / float64(lookups)
		// What the periodic release leaves resident.
		s.mu.Lock()
		s.pagesReleased = time.Time{}
		s.maybeReleasePages()
		s.mu.Unlock()
		rssFileReleased += mb(snapshot().rssFile, before.rssFile)
		st := s.Stats()
		if st.FramesResolved == 0 {
			b.Fatalf("nothing resolved: %+v", st)
		}
		s.Close()
	}
	n := float64(b.N)
	b.ReportMetric(float64(h.files), "files")
	b.ReportMetric(heldHeap/n, "heap-MB")
	b.ReportMetric(peakAlloc/n, "peak-heap-MB")
	b.ReportMetric(rssAnon/n, "rss-anon-MB")
	b.ReportMetric(rssFile/n, "rss-file-MB")
	b.ReportMetric(rssFileReleased/n, "rss-file-released-MB")
	b.ReportMetric(cold/n, "ns/lookup-cold")
	b.ReportMetric(warm/n, "ns/lookup-warm")
}

// BenchmarkUserRepeated symbolizes the same stack of a running Go program
// again and again: the common case of a hot loop sampled many times.
func BenchmarkUserRepeated(b *testing.B) {
	bin, err := testBinary()
	if err != nil {
		b.Skip(err)
	}
	maps, addrs, ok := fixtureMaps(bin)
	if !ok {
		b.Skip("no code in test binary")
	}
	fs := procfs.FS{Root: b.TempDir()}
	dir := fs.Path(7)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		b.Fatal(err)
	}
	stack := make([]uint64, 0, fixtureStackDepth)
	for i := 0; i < len(addrs) && len(stack) < fixtureStackDepth; i += len(addrs) / fixtureStackDepth {
		stack = append(stack, addrs[i])
	}
	s := New(Options{Proc: fs})
	defer s.Close()
	s.User(7, stack)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.User(7, stack)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(stack)), "ns/frame")
}

// BenchmarkKallsyms parses the host's kallsyms and reports the heap held.
func BenchmarkKallsyms(b *testing.B) {
	if _, err := os.Stat(DefaultKallsymsPath); err != nil {
		b.Skip(err)
	}
	before := snapshot()
	var held float64
	var syms int
	for range b.N {
		f, err := os.Open(DefaultKallsymsPath)
		if err != nil {
			b.Fatal(err)
		}
		ks, err := parseKallsyms(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		held += mb(snapshot().heap, before.heap)
		syms = ks.len()
		runtime.KeepAlive(ks)
	}
	b.ReportMetric(float64(syms), "symbols")
	b.ReportMetric(held/float64(b.N), "heap-MB")
}
