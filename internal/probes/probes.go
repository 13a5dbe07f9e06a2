// Package probes times user-space scopes with uprobes: a probe is a pair of
// code locations (a function's entry and return, or an entry symbol and an
// exit symbol such as a C++ constructor/destructor pair) in the executables
// and libraries whose path matches a regular expression. The BPF side keeps a
// per-thread depth counter so nested scopes roll up into the outermost one,
// which alone is timed, filtered by MinDuration, limited to MaxPerSecond
// records per second (in the kernel, before the ring buffer) and reported as
// a capture.RawScope.
//
// Uprobes are attached per file (dev+inode): one attachment covers every
// process mapping the file, running or started later. Files are found by
// scanning /proc at Open, on every exec (tp_btf/sched_process_exec) and
// periodically.
//
// Go binaries: uretprobes break Go's moving stacks (the runtime copies
// goroutine stacks and sees the kernel's trampoline return address), so in
// a Go binary a Spec with Return set (config `symbol:`) puts plain uprobes
// on the function's return instructions (internal/gosites), and every
// probe's uprobes go after the function's stack check, and the scope is
// the goroutine's, not the thread's: a call that blocks resumes on another
// thread. A function without a return instruction, or whose code does not
// decode, is refused with a warning (Stats.Refused). Samples link to
// threads' scopes only. C functions linked into a Go binary with cgo are
// probed as in any other file (they run on the thread's system stack).
package probes

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// MaxProbes is the number of probes one Manager supports.
const MaxProbes = 64

// DefaultMaxPerSecond is the rate limit of a probe whose configuration does
// not set one; MaxMaxPerSecond is the highest limit accepted (a higher rate
// would be no limit: one uprobe pair costs a traced thread tens of
// microseconds).
const (
	DefaultMaxPerSecond = 1000
	MaxMaxPerSecond     = 1000000
)

// Spec declares one probe.
type Spec struct {
	ID string
	// FileMatch is a regular expression on the path of an executable or
	// mapped library as the process sees it.
	FileMatch string
	// EntrySymbol starts the scope; ExitSymbol ends it. With Return set
	// (config `symbol:`), ExitSymbol is empty and the scope ends when the
	// EntrySymbol function returns (uretprobe). Symbols are raw (mangled)
	// names or demangled C++ names, see MatchSymbol.
	EntrySymbol, ExitSymbol string
	Return                  bool
	// EntryUSDT and ExitUSDT ("provider:name"), instead of symbols, start
	// and end the scope at every site of those USDT probes (plain
	// uprobes; a probe's semaphore is incremented while attached).
	EntryUSDT, ExitUSDT string
	// Attributes name arguments of the EntryUSDT probe that its records
	// carry: attribute name -> "argN" (an integer) or "str(argN)" (the
	// NUL-terminated string it points at, at most MaxAttributeString-1
	// bytes); at most MaxAttributes (see ParseAttribute). USDT probes only.
	Attributes map[string]string
	// MainThreadOnly keeps only scopes of the process's main thread (tid == pid).
	MainThreadOnly bool
	// MinDuration drops shorter scopes in the kernel.
	MinDuration time.Duration
	// LinkSamples marks the thread's outermost open scope of this probe in
	// Options.OpenScopes, where the CPU and off-CPU programs read it.
	LinkSamples bool
	// EntryStack captures the user stack (frame pointers) at each
	// outermost entry; records carry it (RawScope.EntryStack).
	EntryStack bool
	// MaxPerSecond limits the records of this probe, in the kernel, before
	// they reach the ring buffer: on average at most this many per second,
	// in bursts of at most a tenth of it; the rest is counted
	// (ProbeDrops.RateLimited). 0: unlimited.
	MaxPerSecond uint64
}

// rateLimit returns the BPF form of a MaxPerSecond limit: the interval
// between records and how far ahead of that schedule a burst may run (see
// rate_allows in bpf/probe.bpf.c); zeros for no limit.
func rateLimit(maxPerSecond uint64) (intervalNs, burstNs uint64) {
	if maxPerSecond == 0 {
		return 0, 0
	}
	intervalNs = max(uint64(time.Second)/maxPerSecond, 1)
	burst := max(maxPerSecond/10, 1) // records
	return intervalNs, (burst - 1) * intervalNs
}

// ProbeDrops counts completed scopes of one probe that the kernel did not
// send to user space.
type ProbeDrops struct {
	RateLimited    uint64 // over the probe's MaxPerSecond
	RingBufferFull uint64 // the records ring buffer was full
	// Abandoned counts goroutines' scopes left without a return (a panic
	// unwinding past the function), found at the goroutine's next entry.
	Abandoned uint64
}

// Stats counts what the probes did since Open.
type Stats struct {
	Records     uint64       // records the kernel emitted
	Drops       []ProbeDrops // by probe index
	ExecDropped uint64       // exec events lost (their processes are found by the periodic rescan)
	Delivered   uint64       // records handed to the caller
	Malformed   uint64       // ring buffer entries that did not decode
	Files       int          // files with at least one probe attached
	Links       int          // uprobes/uretprobes attached
	Missing     int          // (probe, file) pairs skipped because a symbol or USDT probe is missing
	Refused     int          // (probe, file) pairs refused: a Go function without a return, or not decodable; USDT probes in a Go binary, or notes internal/usdt refuses
	Failed      int          // (probe, file) pairs whose last attach failed (tried again at each rescan)
	Labels      LabelLoss    // goroutine labels of Go functions' records left out
}

// LabelLoss counts the records of Go functions whose goroutine's labels
// were not kept whole.
type LabelLoss struct {
	Truncated   uint64 // cut to the bounds (labels, bytes of a key or value, bytes in all)
	Unreadable  uint64 // not read (the goroutine's memory could not be read)
	Undecodable uint64 // labels left out: not UTF-8
}

// Dropped sums Drops over every probe.
func (s Stats) Dropped() ProbeDrops {
	var d ProbeDrops
	for _, p := range s.Drops {
		d.RateLimited += p.RateLimited
		d.RingBufferFull += p.RingBufferFull
		d.Abandoned += p.Abandoned
	}
	return d
}

// FieldError is an invalid value of one field of one Spec: Index is the
// Spec's position, Field its Go name ("FileMatch"; "" for the Spec as a
// whole). The receiver names the configuration key.
type FieldError struct {
	Index int
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("spec %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("spec %d: %s: %v", e.Index, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// ErrNoScope is the error of a Spec with neither symbols nor USDT probes;
// ErrMixedScope of one with both.
var (
	ErrNoScope    = errors.New("no scope: set EntrySymbol with Return, EntrySymbol and ExitSymbol, or EntryUSDT and ExitUSDT")
	ErrMixedScope = errors.New("symbols and USDT probes: a scope is delimited by one or the other")
)

// usdt reports whether the scope is delimited by USDT probes.
func (s Spec) usdt() bool { return s.EntryUSDT != "" || s.ExitUSDT != "" }

// ParseUSDT splits a USDT probe as a Spec names it, "provider:name".
func ParseUSDT(probe string) (provider, name string, err error) {
	provider, name, ok := strings.Cut(probe, ":")
	switch {
	case !ok || provider == "" || name == "" || strings.Contains(name, ":"):
		return "", "", fmt.Errorf("want provider:name, got %q", probe)
	case strings.ContainsFunc(probe, unicode.IsSpace):
		return "", "", fmt.Errorf("%q: a provider or name has no spaces", probe)
	}
	return provider, name, nil
}

// validate checks the Spec at index i.
func (s Spec) validate(i int) []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Index: i, Field: field, Err: fmt.Errorf(format, args...)})
	}
	if s.ID == "" {
		add("ID", "must not be empty")
	}
	if s.FileMatch == "" {
		add("FileMatch", "must not be empty")
	} else if _, err := regexp.Compile(s.FileMatch); err != nil {
		add("FileMatch", "invalid regexp: %v", err)
	}
	symbols := s.Return || s.EntrySymbol != "" || s.ExitSymbol != ""
	switch {
	case symbols && s.usdt():
		errs = append(errs, &FieldError{Index: i, Err: ErrMixedScope})
	case s.usdt():
		errs = append(errs, s.validateUSDT(i)...)
	case s.Return && s.EntrySymbol == "":
		add("EntrySymbol", "must not be empty")
	case s.Return && s.ExitSymbol != "":
		add("ExitSymbol", "must be empty: the scope ends when the function returns")
	case !s.Return && s.EntrySymbol == "" && s.ExitSymbol == "":
		errs = append(errs, &FieldError{Index: i, Err: ErrNoScope})
	case !s.Return && s.EntrySymbol == "":
		add("EntrySymbol", "must not be empty: the scope needs an entry symbol too")
	case !s.Return && s.ExitSymbol == "":
		add("ExitSymbol", "must not be empty: the scope needs an exit symbol too")
	case !s.Return && s.EntrySymbol == s.ExitSymbol:
		add("ExitSymbol", "must differ from the entry symbol (a function's entry and return is a probe of one symbol)")
	}
	if _, aerrs := s.attributes(i); len(aerrs) > 0 {
		errs = append(errs, aerrs...)
	}
	if s.MinDuration < 0 {
		add("MinDuration", "must not be negative")
	}
	if s.MaxPerSecond > MaxMaxPerSecond {
		add("MaxPerSecond", "must be 0 (unlimited) to %d, got %d", MaxMaxPerSecond, s.MaxPerSecond)
	}
	return errs
}

// validateUSDT checks the USDT probes of the Spec at index i.
func (s Spec) validateUSDT(i int) []error {
	var errs []error
	for _, p := range []struct{ field, probe, side string }{{"EntryUSDT", s.EntryUSDT, "an entry"}, {"ExitUSDT", s.ExitUSDT, "an exit"}} {
		var err error
		if p.probe == "" {
			err = fmt.Errorf("must not be empty: the scope needs %s probe too", p.side)
		} else {
			_, _, err = ParseUSDT(p.probe)
		}
		if err != nil {
			errs = append(errs, &FieldError{Index: i, Field: p.field, Err: err})
		}
	}
	if len(errs) == 0 && s.EntryUSDT == s.ExitUSDT {
		errs = append(errs, &FieldError{Index: i, Field: "ExitUSDT", Err: errors.New("must differ from the entry probe")})
	}
	return errs
}

// ValidateSpecs checks every Spec and that ids are unique. The problems of
// a Spec are *FieldError values (joined).
func ValidateSpecs(specs []Spec) error {
	var errs []error
	if len(specs) > MaxProbes {
		errs = append(errs, fmt.Errorf("at most %d probes are supported, got %d", MaxProbes, len(specs)))
	}
	seen := make(map[string]int)
	for i, s := range specs {
		errs = append(errs, s.validate(i)...)
		if s.ID == "" {
			continue
		}
		if j, dup := seen[s.ID]; dup {
			errs = append(errs, &FieldError{Index: i, Field: "ID", Err: fmt.Errorf("%q already used by probe %d", s.ID, j)})
		} else {
			seen[s.ID] = i
		}
	}
	return errors.Join(errs...)
}
