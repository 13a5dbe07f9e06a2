package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// CgroupLine is one line of /proc/<pid>/cgroup:
// "hierarchy-ID:controller-list:cgroup-path". The cgroup v2 (unified) line
// has hierarchy 0 and no controllers ("0::/system.slice/x.service").
type CgroupLine struct {
	HierarchyID int
	Controllers []string // nil for the v2 line; "name=systemd" for named v1 hierarchies
	Path        string
}

// V2 reports whether the line is the cgroup v2 (unified hierarchy) line.
func (l CgroupLine) V2() bool {
	return l.HierarchyID == 0 && len(l.Controllers) == 0
}

// String formats the line as the kernel writes it.
func (l CgroupLine) String() string {
	return strconv.Itoa(l.HierarchyID) + ":" + strings.Join(l.Controllers, ",") + ":" + l.Path
}

// Cgroup returns the cgroup membership of pid, one entry per hierarchy.
func (fs FS) Cgroup(pid uint32) ([]CgroupLine, error) {
	name := fs.Path(pid, "cgroup")
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	lines, err := ParseCgroup(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return lines, nil
}

// scanLinesExact splits at '\n' only: unlike bufio.ScanLines it keeps a
// trailing '\r', which a cgroup name may end with.
func scanLinesExact(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// ParseCgroup parses the content of a cgroup file. Empty lines are skipped;
// a line without two colons, with a bad hierarchy id or without a path is an
// error. Paths keep any further colons.
func ParseCgroup(r io.Reader) ([]CgroupLine, error) {
	var lines []CgroupLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4*1024), 1024*1024)
	sc.Split(scanLinesExact)
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if text == "" {
			continue
		}
		id, rest, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("cgroup line %d: want id:controllers:path, got %q", n, text)
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("cgroup line %d: want id:controllers:path, got %q", n, text)
		}
		hid, err := strconv.ParseUint(id, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("cgroup line %d: bad hierarchy id %q", n, id)
		}
		if path == "" {
			return nil, fmt.Errorf("cgroup line %d: empty path", n)
		}
		l := CgroupLine{HierarchyID: int(hid), Path: path}
		if ctrls != "" {
			l.Controllers = strings.Split(ctrls, ",")
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return lines, nil
}
