// Package assemble turns raw kernel stacks (addresses keyed by pid and tid)
// into a report.Profile: it groups them by process, keeps only the targeted
// processes, symbolizes each stack once and attaches the process identity.
// CPU samples and off-CPU waits both go through it.
package assemble

import (
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
)

// Symbolizer resolves addresses to frames, leaf first.
type Symbolizer interface {
	Kernel(addrs []uint64) []report.Frame
	User(pid uint32, addrs []uint64) []report.Frame
	// Runtime names the frame of runtime (internal/runtimes) in process
	// pid whose object is at object, at position in it; native is the
	// address of the native frame a frame read in place names (0: none).
	// The frames of functions inlined there come first (Inlined), the
	// frame's own last.
	Runtime(pid uint32, runtime string, object uint64, position uint32, native uint64) []report.Frame
	// UserExited is User for a process whose identity could not be read
	// (it exited): only what was read of it before is used.
	UserExited(pid uint32, addrs []uint64) []report.Frame
}

// Identities resolves a process's identity; on error the returned identity
// is still used (it holds at least the pid), and the process is taken as
// exited: nothing more is read of it.
type Identities interface {
	Resolve(pid uint32) (report.Identity, error)
}

// ThreadAttributeKeys is implemented by Identities that know the key map
// of a process's thread context records (its process context's
// threadlocal.attribute_key_map).
type ThreadAttributeKeys interface {
	ThreadAttributeKeys(pid uint32) []string
}

// MappedStrings is implemented by Symbolizers that read the strings of a
// process's executable: the Go labels the samplers stored by reference
// (golabels.Decode). exited: only what was read of the process before.
type MappedStrings interface {
	ReadExecutableString(pid uint32, addr uint64, n int, exited bool) ([]byte, bool)
}

// ThreadNamer names a thread the kernel did not name.
type ThreadNamer func(pid, tid uint32) string

// Assembler builds profiles; it is not safe for concurrent use.
type Assembler struct {
	Symbols    Symbolizer
	Identities Identities
	ThreadName ThreadNamer
	// Keep, when set, decides per process whether its samples are kept.
	Keep func(report.Identity) bool
}

// Stats describes one Assemble call.
type Stats struct {
	Processes      int   // processes with samples in the profile
	Frames         int   // frames emitted
	Unsymbolized   int   // frames emitted without a function name
	FilteredValues int64 // sum of values of processes dropped by Keep
	// TraceAttributesDropped counts thread context attributes left out
	// (a key index the process context does not name, not UTF-8, too many).
	TraceAttributesDropped int
	// GoLabelsDropped counts Go labels left out: not UTF-8, or cut short
	// of their bytes.
	GoLabelsDropped int
}

// threadKeys returns the key map of pid's thread context records.
func (a *Assembler) threadKeys(pid uint32) []string {
	if k, ok := a.Identities.(ThreadAttributeKeys); ok {
		return k.ThreadAttributeKeys(pid)
	}
	return nil
}

// Assemble builds the profile of one report.
func (a *Assembler) Assemble(kind report.Kind, start, end time.Time, period int64, stacks []capture.RawStack) (report.Profile, Stats) {
	byPID := map[uint32][]capture.RawStack{}
	for _, s := range stacks {
		if s.Value == 0 {
			continue
		}
		byPID[s.PID] = append(byPID[s.PID], s)
	}
	pids := make([]uint32, 0, len(byPID))
	for pid := range byPID {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })

	prof := report.Profile{Kind: kind, Start: start, End: end, Period: period}
	var st Stats
	for _, pid := range pids {
		// A process that exited before it was read (an error), or while it
		// was (read without a name), is named by what the kernel recorded.
		id, err := a.Identities.Resolve(pid)
		exited := err != nil
		id = nameUnread(id, byPID[pid])
		if a.Keep != nil && !a.Keep(id) {
			for _, s := range byPID[pid] {
				st.FilteredValues += int64(s.Value)
			}
			continue
		}
		proc := report.Process{Identity: id}
		goLabels := a.goLabelDecoder(pid, exited, &st)
		for _, s := range byPID[pid] {
			frames := a.frames(s, id, exited)
			for _, f := range frames {
				if f.Function == "" {
					st.Unsymbolized++
				}
			}
			st.Frames += len(frames)
			sample := report.Sample{
				TID:        s.TID,
				ThreadName: a.threadName(s),
				Frames:     frames,
				Value:      int64(s.Value),
			}
			if s.Scope != nil {
				sample.Scope = &report.SampleScope{ProbeIndex: s.Scope.ProbeIndex, Start: s.Scope.Start, Goroutine: s.Scope.Goroutine}
			}
			if s.Trace != nil {
				sample.Trace = &report.TraceLink{TraceID: s.Trace.TraceID, SpanID: s.Trace.SpanID}
				if len(s.Trace.Attrs) > 0 {
					var dropped int
					sample.Attributes, dropped = threadctx.DecodeAttributes(s.Trace.Attrs, a.threadKeys(pid))
					st.TraceAttributesDropped += dropped
				}
			}
			if s.GoLabels != nil {
				labels := goLabels(s.GoLabels)
				if sample.Attributes == nil {
					sample.Attributes = maps.Clone(labels)
				} else {
					for k, v := range labels { // the SDK's attributes win
						if _, ok := sample.Attributes[k]; !ok {
							sample.Attributes[k] = v
						}
					}
				}
			}
			proc.Samples = append(proc.Samples, sample)
		}
		prof.Processes = append(prof.Processes, proc)
		st.Processes++
	}
	return prof, st
}

// goLabelDecoder returns what decodes the Go labels of pid's samples:
// once per set (an id is the same bytes within a report), its strings by reference
// read from the process's executable, its drops counted in st.
func (a *Assembler) goLabelDecoder(pid uint32, exited bool, st *Stats) func(*capture.GoLabels) map[string]string {
	var read golabels.ReadString
	if ms, ok := a.Symbols.(MappedStrings); ok {
		read = func(addr uint64, n int) ([]byte, bool) { return ms.ReadExecutableString(pid, addr, n, exited) }
	}
	type set struct {
		labels  map[string]string
		dropped int
	}
	decoded := map[uint32]set{}
	return func(l *capture.GoLabels) map[string]string {
		d, ok := decoded[l.ID]
		if !ok {
			d.labels, d.dropped = golabels.Decode(l.Data, read)
			decoded[l.ID] = d
		}
		st.GoLabelsDropped += d.dropped // per sample, as the labels are
		return d.labels
	}
}

// nameUnread names a process whose identity has no service name (it exited
// before or while it was read): by what the kernel recorded with its
// samples, a kernel
// thread (no user stack taken) under attrkey.KernelServiceName, else by the
// thread name of its main thread (or of any thread), so that it has a
// service.name a backend can show.
func nameUnread(id report.Identity, stacks []capture.RawStack) report.Identity {
	if _, ok := id.Attributes[attrkey.ServiceName]; ok {
		return id
	}
	kernel, comm := true, ""
	for _, s := range stacks {
		if hasFrames(s, capture.UserFrame) || s.UserLoss != capture.StackKept {
			kernel = false
		}
		if s.Comm != "" && (comm == "" || s.TID == s.PID) {
			comm = s.Comm
		}
	}
	name := comm
	if kernel {
		name = attrkey.KernelServiceName
	}
	if name == "" {
		return id
	}
	id.Attributes = maps.Clone(id.Attributes)
	if id.Attributes == nil {
		id.Attributes = map[string]any{}
	}
	id.Attributes[attrkey.ServiceName] = name
	return id
}

// frames returns the kernel frames (leaf first) followed by the user frames
// of a stack of process id (exited: its files are not read); a lost stack is
// one marker frame.
func (a *Assembler) frames(s capture.RawStack, id report.Identity, exited bool) []report.Frame {
	var out []report.Frame
	if kernel := s.Addresses(capture.KernelFrame); len(kernel) > 0 {
		out = append(out, dropTracingFrames(a.Symbols.Kernel(kernel))...)
	} else if s.KernelLoss != capture.StackKept {
		out = append(out, markerFrame(s.KernelLoss, true))
	}
	var native []report.Frame
	if addrs := s.Addresses(capture.UserFrame); len(addrs) > 0 {
		addrs = a.withLinkRegister(s, addrs, exited)
		native = nameJITFrames(a.user(s, addrs, exited), id.ExeName)
	} else if s.UserLoss != capture.StackKept {
		native = []report.Frame{markerFrame(s.UserLoss, false)}
	}
	return append(out, a.withRuntimes(s, native)...)
}

// skippingSymbolizer is a Symbolizer that can leave some addresses of a
// stack unresolved (symbolize.Symbolizer is one).
type skippingSymbolizer interface {
	UserSkipping(pid uint32, addrs []uint64, skip []bool, exited bool) []report.Frame
}

// user symbolizes the user addresses of s, but for the native frames of its
// runtime frames read in place that have a name: inPlace puts those there.
func (a *Assembler) user(s capture.RawStack, addrs []uint64, exited bool) []report.Frame {
	if ss, ok := a.Symbols.(skippingSymbolizer); ok {
		if skip := a.placedNamed(s, addrs); skip != nil {
			return ss.UserSkipping(s.PID, addrs, skip, exited)
		}
	}
	if exited {
		return a.Symbols.UserExited(s.PID, addrs)
	}
	return a.Symbols.User(s.PID, addrs)
}

// placedNamed marks the addresses of addrs (the user frames of s) that are
// the native frames of runtime frames read in place (capture.Frame.Native)
// with a name, matched in order as inPlace matches them; nil when none is.
func (a *Assembler) placedNamed(s capture.RawStack, addrs []uint64) []bool {
	var skip []bool
	i := 0
	for _, f := range s.Frames {
		if f.Kind != capture.RuntimeFrame || f.Native == 0 {
			continue
		}
		for i < len(addrs) && addrs[i] != f.Native {
			i++
		}
		if i == len(addrs) {
			break
		}
		if named(a.Symbols.Runtime(s.PID, f.Runtime.Name(), f.Address, f.Position, f.Native)) {
			if skip == nil {
				skip = make([]bool, len(addrs))
			}
			skip[i] = true
		}
		i++
	}
	return skip
}

// nameJITFrames gives the perf-map frames of a process running exe the
// frame type of its runtime; native when the runtime is not known.
func nameJITFrames(frames []report.Frame, exe string) []report.Frame {
	jit := jitFrameType(exe)
	for i := range frames {
		if frames[i].Type == report.FrameJIT {
			frames[i].Type = jit
		}
	}
	return frames
}

// jitFrameType is the frame type of JIT code in a process running exe (its
// base name): the runtimes that write perf maps.
func jitFrameType(exe string) string {
	switch {
	case exe == "node" || exe == "nodejs":
		return report.FrameV8JS
	case strings.HasPrefix(exe, "python"):
		return report.FramePython
	case exe == "java":
		return report.FrameJVM
	default:
		return report.FrameNative
	}
}

// hasFrames reports whether s has frames of kind.
func hasFrames(s capture.RawStack, kind capture.FrameKind) bool {
	for _, f := range s.Frames {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

// markerFrame stands for a lost stack: no address, no mapping, a function
// name saying what was lost and why.
func markerFrame(loss capture.StackLoss, kernel bool) report.Frame {
	return report.Frame{Function: loss.Marker(kernel), Type: report.FrameUnknown}
}

// dropTracingFrames removes the leading kernel frames of the BPF machinery
// that captured the stack (a tracepoint program sees itself and
// bpf_trace_run* above the traced function); they are not the workload's.
func dropTracingFrames(frames []report.Frame) []report.Frame {
	for len(frames) > 0 && isTracingFrame(frames[0].Function) {
		frames = frames[1:]
	}
	return frames
}

func isTracingFrame(fn string) bool {
	return strings.HasPrefix(fn, "bpf_prog_") || strings.HasPrefix(fn, "bpf_trace_run") ||
		strings.HasPrefix(fn, "__bpf_trace_") || strings.HasPrefix(fn, "__traceiter_")
}

func (a *Assembler) threadName(s capture.RawStack) string {
	if s.Comm != "" || a.ThreadName == nil {
		return s.Comm
	}
	return a.ThreadName(s.PID, s.TID)
}
