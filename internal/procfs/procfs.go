// Package procfs is the one /proc reader of the project: memory maps,
// executable, thread names, status (NSpid), cgroup membership and start
// times. Parsers take readers so they can be tested on fixtures; FS.Root
// points them at a real or fake /proc.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FS reads process information below Root ("/proc" normally).
type FS struct {
	Root string
}

// Default is the host's /proc.
var Default = FS{Root: "/proc"}

func (fs FS) root() string {
	if fs.Root == "" {
		return "/proc"
	}
	return fs.Root
}

// Path returns the path of a file of process pid, e.g. Path(1, "maps").
func (fs FS) Path(pid uint32, name ...string) string {
	parts := append([]string{fs.root(), strconv.FormatUint(uint64(pid), 10)}, name...)
	return filepath.Join(parts...)
}

// RootPath returns "<Root>/<pid>/root<path>": the way to open a file as the
// process sees it, inside its mount namespace (containers).
func (fs FS) RootPath(pid uint32, path string) string {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return fs.Path(pid, "root") + path
}

const deletedSuffix = " (deleted)"

// Exe returns the path of the executable of pid, without a " (deleted)" suffix.
func (fs FS) Exe(pid uint32) (string, error) {
	name := fs.Path(pid, "exe")
	p, err := os.Readlink(name)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSuffix(p, deletedSuffix), nil
}

// Comm returns the command name of pid.
func (fs FS) Comm(pid uint32) (string, error) {
	return readComm(fs.Path(pid, "comm"))
}

// ThreadComm returns the name of thread tid of process pid.
func (fs FS) ThreadComm(pid, tid uint32) (string, error) {
	return readComm(fs.Path(pid, "task", strconv.FormatUint(uint64(tid), 10), "comm"))
}

func readComm(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return string(bytes.TrimSuffix(b, []byte("\n"))), nil
}

// Maps returns the memory mappings of pid.
func (fs FS) Maps(pid uint32) ([]Map, error) { return fs.maps(pid, ParseMaps) }

// ExecMaps returns the executable memory mappings of pid.
func (fs FS) ExecMaps(pid uint32) ([]Map, error) { return fs.maps(pid, ParseExecMaps) }

func (fs FS) maps(pid uint32, parse func(io.Reader) ([]Map, error)) ([]Map, error) {
	name := fs.Path(pid, "maps")
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	m, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return m, nil
}

// Status returns the parsed status file of pid.
func (fs FS) Status(pid uint32) (Status, error) {
	name := fs.Path(pid, "status")
	f, err := os.Open(name)
	if err != nil {
		return Status{}, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	st, err := ParseStatus(f)
	if err != nil {
		return Status{}, fmt.Errorf("read %s: %w", name, err)
	}
	return st, nil
}

// StartTime returns the start time of pid in clock ticks since boot (field
// 22 of the stat file). Together with the pid it identifies a process.
// It reads the main thread's stat file, which has the process's start
// time: the process's own sums the times of all its threads first.
func (fs FS) StartTime(pid uint32) (uint64, error) {
	name := fs.Path(pid, "task/"+strconv.FormatUint(uint64(pid), 10)+"/stat")
	b, err := readSmall(name)
	if errors.Is(err, os.ErrNotExist) { // a tree without tasks (or the process is gone)
		name = fs.Path(pid, "stat")
		b, err = readSmall(name)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	t, err := ParseStatStartTime(b)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	return t, nil
}

// smallFile is more than a stat file holds (its comm is at most 64 bytes,
// its 52 numbers at most 20 digits each).
const smallFile = 2048

// readSmall reads a proc file of at most smallFile bytes in one read.
func readSmall(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, smallFile)
	n, err := f.Read(b)
	if err != nil {
		return nil, err
	}
	if n == len(b) {
		return nil, fmt.Errorf("more than %d bytes", smallFile)
	}
	return b[:n], nil
}

// maxArgv0 bounds what Argv0 reads: the command line is the process's to
// write.
const maxArgv0 = 4096

// Argv0 returns the first argument of pid's command line (the program name
// it was started as), read up to maxArgv0 bytes.
func (fs FS) Argv0(pid uint32) (string, error) {
	name := fs.Path(pid, "cmdline")
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxArgv0))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

// pfKThread is PF_KTHREAD (include/linux/sched.h) in the stat flags.
const pfKThread = 0x00200000

// KernelThread reports whether pid is a kernel thread (PF_KTHREAD in field
// 9 of its stat file).
func (fs FS) KernelThread(pid uint32) (bool, error) {
	name := fs.Path(pid, "stat")
	b, err := os.ReadFile(name)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	flags, err := statField(b, 9)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	return flags&pfKThread != 0, nil
}

// statField returns numeric field n (1-based, n >= 3) of a stat line.
func statField(b []byte, n int) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in stat line")
	}
	fields := strings.Fields(string(b[i+1:]))
	if idx := n - 3; idx < 0 || len(fields) <= idx {
		return 0, fmt.Errorf("stat line has %d fields after the command name, want field %d", len(fields), n)
	}
	return strconv.ParseUint(fields[n-3], 10, 64)
}

// ParseStatStartTime returns field 22 (starttime) of a stat line. The comm
// field (2) may hold spaces and parentheses, so fields are counted from the
// last ')'.
func ParseStatStartTime(b []byte) (uint64, error) {
	v, err := statField(b, 22)
	if err != nil {
		return 0, fmt.Errorf("parse starttime: %w", err)
	}
	return v, nil
}
