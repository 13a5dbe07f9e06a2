package symbolize

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
)

// perfMapEntry is one line of a /tmp/perf-<pid>.map JIT symbol file.
type perfMapEntry struct {
	start, size uint64
	name        string // a substring of the file's content
}

// perfMap is a parsed perf map file with the file state it was read at.
type perfMap struct {
	entries []perfMapEntry // sorted by start
	size    int64
	mtime   time.Time
}

// heapCost estimates the Go heap held by pm: the file's content, which the
// names share, and the entries.
func (pm *perfMap) heapCost() int64 {
	return pm.size + int64(len(pm.entries))*32
}

// parsePerfMap parses "START SIZE name" lines (hex, with or without 0x).
// Malformed lines are skipped: JIT runtimes append while we read, so the last
// line may be partial. The names share one copy of the content: the heap
// held is the bytes read plus 32 bytes per entry. sizeHint is the expected
// size of the content.
func parsePerfMap(r io.Reader, sizeHint int64) ([]perfMapEntry, error) {
	var b strings.Builder
	b.Grow(int(min(max(sizeHint, 0)+512, 1<<30)))
	if _, err := io.Copy(&b, r); err != nil {
		return nil, fmt.Errorf("perf map: %w", err)
	}
	content := b.String()
	var out []perfMapEntry
	for len(content) > 0 {
		var line string
		line, content, _ = strings.Cut(content, "\n")
		line = strings.TrimSpace(line)
		startS, rest, ok1 := strings.Cut(line, " ")
		sizeS, name, ok2 := strings.Cut(strings.TrimLeft(rest, " "), " ")
		if !ok1 || !ok2 {
			continue
		}
		start, err1 := parseHex(startS)
		size, err2 := parseHex(sizeS)
		name = strings.TrimSpace(name)
		if err1 != nil || err2 != nil || name == "" || start+size < start {
			continue
		}
		out = append(out, perfMapEntry{start: start, size: size, name: name})
	}
	// Later entries win on equal start (code regions are reused by the JIT).
	sort.SliceStable(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

func parseHex(s string) (uint64, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	return strconv.ParseUint(s, 16, 64)
}

// lookup returns the name of the JIT function containing addr, or "".
func (pm *perfMap) lookup(addr uint64) string {
	e := pm.entries
	i := sort.Search(len(e), func(i int) bool { return e[i].start > addr }) - 1
	// Entries may overlap after code was moved; the latest entry that starts
	// at or before addr and contains it wins. Look back a little.
	for j := i; j >= 0 && j > i-8; j-- {
		if addr < e[j].start+max(e[j].size, 1) {
			return e[j].name
		}
	}
	return ""
}

// loadPerfMap returns the perf map at path inside the root of process pid,
// whose status is st, re-reading it only when its size or modification time
// changed since prev was read. The file is the process's to write, so it is
// hostile input: opened with procfs.OpenInRoot (a regular file, no link out
// of the process's root, no FIFO), refused unless owned by the process's uid
// or root, and refused when larger than limit bytes, before reading and
// while reading (it may grow meanwhile): never more than limit+1 bytes are
// read. It may block on FUSE or a network file system: the caller runs it
// under a procfs.Deadline.
func loadPerfMap(proc procfs.FS, pid uint32, path string, st procfs.Status, prev *perfMap, limit int64) (*perfMap, error) {
	f, err := proc.OpenInRoot(pid, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := procfs.CheckOwner(f, st); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, tooLarge(f.Name(), fi.Size(), limit)
	}
	if prev != nil && prev.size == fi.Size() && prev.mtime.Equal(fi.ModTime()) {
		return prev, nil
	}
	entries, n, err := readPerfMap(f.Name(), f, fi.Size(), limit)
	if err != nil {
		return nil, err
	}
	return &perfMap{entries: entries, size: n, mtime: fi.ModTime()}, nil
}

// readPerfMap parses the perf map r (named name, of about sizeHint bytes),
// reading at most limit+1 bytes: more than limit is refused as too large.
// It returns the entries and the bytes read.
func readPerfMap(name string, r io.Reader, sizeHint, limit int64) ([]perfMapEntry, int64, error) {
	cr := &countingReader{r: io.LimitReader(r, limit+1)}
	entries, err := parsePerfMap(cr, min(sizeHint, limit))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", name, err)
	}
	if cr.n > limit {
		return nil, 0, tooLarge(name, cr.n, limit)
	}
	return entries, cr.n, nil
}

func tooLarge(name string, size, limit int64) error {
	return &procfs.RefusedError{Path: name, Reason: procfs.ReasonTooLarge,
		Detail: fmt.Sprintf("%d bytes or more, over the limit of %d bytes", size, limit)}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
