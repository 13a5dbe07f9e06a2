package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// perfMapEntry is one line of a /tmp/perf-<pid>.map JIT symbol file.
type perfMapEntry struct {
	start, size uint64
	name        string
}

// perfMap is a parsed perf map file with the file state it was read at.
type perfMap struct {
	entries []perfMapEntry // sorted by start
	size    int64
	mtime   time.Time
}

// maxPerfMapLine bounds one line of a perf map (long C++ template names).
const maxPerfMapLine = 1 << 20

// parsePerfMap parses "START SIZE name" lines (hex, with or without 0x).
// Malformed lines are skipped: JIT runtimes append while we read, so the last
// line may be partial.
func parsePerfMap(r io.Reader) ([]perfMapEntry, error) {
	var out []perfMapEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxPerfMapLine)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
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
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("perf map: %w", err)
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

// loadPerfMap returns the perf map at path, re-reading it only when its
// size or modification time changed since prev was read.
func loadPerfMap(path string, prev *perfMap) (*perfMap, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.size == st.Size() && prev.mtime.Equal(st.ModTime()) {
		return prev, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := parsePerfMap(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &perfMap{entries: entries, size: st.Size(), mtime: st.ModTime()}, nil
}
