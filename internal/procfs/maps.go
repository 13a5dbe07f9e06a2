package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Map is one line of /proc/<pid>/maps.
type Map struct {
	Start, End, Offset uint64
	Perms              string // e.g. "r-xp"
	DevMajor, DevMinor uint32
	Inode              uint64
	Path               string // "" for anonymous mappings; may be "[heap]", "[vdso]", "/x (deleted)"
}

// Executable reports whether the mapping is executable.
func (m Map) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// Contains reports whether addr is inside the mapping.
func (m Map) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// FileBacked reports whether the mapping is backed by a regular file (an
// absolute path and a non-zero inode). Shared anonymous memory is not,
// though the kernel names it by an inode of its own: "/dev/zero (deleted)"
// (mmap MAP_SHARED|MAP_ANONYMOUS; PHP's opcache and its JIT buffer) and
// "/SYSV<key> (deleted)" (a System V segment).
func (m Map) FileBacked() bool {
	return m.Inode != 0 && strings.HasPrefix(m.Path, "/") && !m.sharedAnonymous()
}

func (m Map) sharedAnonymous() bool {
	return m.Path == "/dev/zero"+deletedSuffix || strings.HasPrefix(m.Path, "/SYSV") && m.Deleted()
}

// Deleted reports whether the mapped file was deleted.
func (m Map) Deleted() bool { return strings.HasSuffix(m.Path, deletedSuffix) }

// ParseMaps parses the content of a maps file. Lines are kept in file
// order (ascending addresses).
func ParseMaps(r io.Reader) ([]Map, error) { return parseMaps(r, false) }

// ParseExecMaps is ParseMaps keeping only the executable mappings: the
// other lines (most of a JVM's or a browser's thousands) are skipped
// without being parsed.
func ParseExecMaps(r io.Reader) ([]Map, error) { return parseMaps(r, true) }

func parseMaps(r io.Reader, execOnly bool) ([]Map, error) {
	var out []Map
	sc := bufio.NewScanner(r)
	// Lines are short; a path of PATH_MAX grows the buffer once.
	sc.Buffer(make([]byte, 0, 4096), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		b := sc.Bytes()
		if execOnly && !mayBeExecutable(b) {
			continue
		}
		line := string(b)
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		if execOnly && !m.Executable() {
			continue
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("maps line %d: %w", n+1, err)
	}
	return out, nil
}

// mayBeExecutable says whether a maps line is not known to be of a
// mapping that is not executable: its second field has no 'x' third.
func mayBeExecutable(line []byte) bool {
	line = bytes.TrimLeft(line, " \t")
	i := bytes.IndexAny(line, " \t")
	if i < 0 {
		return true
	}
	perms := bytes.TrimLeft(line[i:], " \t")
	return len(perms) < 3 || perms[2] == 'x'
}

// nextField returns the next space-separated field of s and the rest.
func nextField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

func parseMapsLine(line string) (Map, error) {
	var m Map
	addrs, rest := nextField(line)
	perms, rest := nextField(rest)
	off, rest := nextField(rest)
	dev, rest := nextField(rest)
	inode, rest := nextField(rest)
	if inode == "" {
		return m, fmt.Errorf("too few fields in %q", line)
	}
	start, end, ok := strings.Cut(addrs, "-")
	if !ok {
		return m, fmt.Errorf("bad address range %q", addrs)
	}
	var err error
	if m.Start, err = strconv.ParseUint(start, 16, 64); err != nil {
		return m, fmt.Errorf("bad start address %q", start)
	}
	if m.End, err = strconv.ParseUint(end, 16, 64); err != nil {
		return m, fmt.Errorf("bad end address %q", end)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("end %#x before start %#x", m.End, m.Start)
	}
	if len(perms) != 4 {
		return m, fmt.Errorf("bad permissions %q", perms)
	}
	m.Perms = perms
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("bad offset %q", off)
	}
	maj, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return m, fmt.Errorf("bad device %q", dev)
	}
	v, err := strconv.ParseUint(maj, 16, 32)
	if err != nil {
		return m, fmt.Errorf("bad device %q", dev)
	}
	m.DevMajor = uint32(v)
	if v, err = strconv.ParseUint(minor, 16, 32); err != nil {
		return m, fmt.Errorf("bad device %q", dev)
	}
	m.DevMinor = uint32(v)
	if m.Inode, err = strconv.ParseUint(inode, 10, 64); err != nil {
		return m, fmt.Errorf("bad inode %q", inode)
	}
	// The path is the rest after padding; it may contain spaces.
	m.Path = strings.TrimLeft(rest, " \t")
	return m, nil
}
