// Package capabilities names the Linux capability an operation failed for:
// when loading a BPF program, opening a perf event or attaching a uprobe
// fails with EPERM or EACCES, Explain compares what the operation needs with
// the process's effective set and turns the error into one that names what
// is missing, instead of a hint at an unrelated cause (cilium/ebpf suggests
// RLIMIT_MEMLOCK for every EPERM).
package capabilities

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Capability is a Linux capability number (linux/capability.h).
type Capability uint

// The capabilities the collector uses.
const (
	DACReadSearch Capability = 2  // read files and search directories of other users
	SysPtrace     Capability = 19 // /proc/<pid>/maps, exe and root of other users' processes
	SysAdmin      Capability = 21 // perf_uprobe events on this kernel; implies BPF and Perfmon
	Syslog        Capability = 34 // real addresses in /proc/kallsyms
	Perfmon       Capability = 38 // perf events on every CPU, tracing programs
	BPF           Capability = 39 // bpf(2): programs and maps
)

var names = map[Capability]string{
	DACReadSearch: "CAP_DAC_READ_SEARCH",
	SysPtrace:     "CAP_SYS_PTRACE",
	SysAdmin:      "CAP_SYS_ADMIN",
	Syslog:        "CAP_SYSLOG",
	Perfmon:       "CAP_PERFMON",
	BPF:           "CAP_BPF",
}

func (c Capability) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("capability %d", uint(c))
}

// Set is a capability set as the kernel stores it: bit c for capability c.
type Set uint64

// Has reports whether s holds c, counting CAP_SYS_ADMIN as CAP_BPF and
// CAP_PERFMON the way the kernel does (bpf_capable, perfmon_capable).
func (s Set) Has(c Capability) bool {
	if s&(1<<c) != 0 {
		return true
	}
	return (c == BPF || c == Perfmon) && s&(1<<SysAdmin) != 0
}

// memlockHint is what cilium/ebpf appends to every EPERM of a map or program
// load; it misleads when a capability is what is missing.
const memlockHint = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// MissingError is a permission error of an operation whose capabilities the
// process lacks.
type MissingError struct {
	Err     error        // the operation's error
	Missing []Capability // what the operation needs and the process lacks
}

func (e *MissingError) Error() string {
	them := "them"
	if len(e.Missing) == 1 {
		them = "it"
	}
	return fmt.Sprintf("%s: the collector lacks %s; run as root or grant %s",
		strings.Replace(e.Err.Error(), memlockHint, "", 1), joinNames(e.Missing), them)
}

func (e *MissingError) Unwrap() error { return e.Err }

func joinNames(cs []Capability) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// Explain returns err as a *MissingError naming the capabilities of need
// that the process's effective set lacks, when err is a permission error
// (EPERM, EACCES). Otherwise, or when nothing is missing (the cause is
// elsewhere: seccomp, an LSM, a sysctl), it returns err unchanged.
func Explain(err error, need ...Capability) error {
	if !IsPermission(err) {
		return err
	}
	eff, cerr := Effective()
	if cerr != nil {
		return err
	}
	return explainWith(err, eff, need)
}

// IsPermission reports whether err is an EPERM or EACCES.
func IsPermission(err error) bool {
	return errors.Is(err, fs.ErrPermission)
}

func explainWith(err error, eff Set, need []Capability) error {
	var missing []Capability
	for _, c := range need {
		if !eff.Has(c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return err
	}
	return &MissingError{Err: err, Missing: missing}
}
