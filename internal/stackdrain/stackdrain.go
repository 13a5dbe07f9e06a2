// Package stackdrain reads and clears the double-buffered stack aggregation
// that the BPF programs of bpf/ (cpu.bpf.c, offcpu.bpf.c) share: two sets of
// (counts, stacks) maps and per-generation stats, a config map selecting the
// generation the program writes, per-CPU in-flight counters, thread names and
// the target pid filter. The CPU sampler and the off-CPU tracer both drain
// through it.
//
// Kernel-facing code lives in stackdrain_linux.go; this file holds the result
// types and the pure conversions, which are tested without root.
package stackdrain

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/scopemap"
)

// MaxTargets is the capacity of the BPF pid filter (target_pids).
const MaxTargets = 4096

// The flags of a new_pids entry (bpf/announce.h): a process that exec'ed
// (ANNOUNCE_EXEC), exited (ANNOUNCE_EXIT), or has mappings its tables do
// not cover (ANNOUNCE_RESCAN).
const (
	announceExec   = 0x80000000
	announceExit   = 0x40000000
	announceRescan = 0x20000000
	announceFlags  = announceExec | announceExit | announceRescan
)

// decodeProcessEvent decodes a new_pids entry (bpf/announce.h).
func decodeProcessEvent(v uint32) capture.ProcessEvent {
	return capture.ProcessEvent{
		PID:    v &^ announceFlags,
		Exec:   v&announceExec != 0,
		Exit:   v&announceExit != 0,
		Rescan: v&announceRescan != 0,
	}
}

// The drain reads the maps of every stack-aggregating program (cpu.bpf.c,
// offcpu.bpf.c, offcpu_switchout.bpf.c) with the types bpf2go generated for
// bpf/common.h from the cpu object; bpf's TestSharedStructsAgree keeps the
// other objects' alike.
type (
	stackKey    = bpf.CpuStackKey
	config      = bpf.CpuSamplerConfig
	counters    = bpf.CpuSamplerStats // per CPU
	threadComm  = bpf.CpuThreadComm
	inflightSeq = bpf.CpuInflightSeq // per-CPU program entry/exit counts
)

// numBPFStackLosses is NR_STACK_LOSSES of bpf/common.h.
const numBPFStackLosses = len(counters{}.UserStackLost)

// bpfStackLoss maps enum stack_loss of bpf/common.h to capture.StackLoss.
var bpfStackLoss = [numBPFStackLosses]capture.StackLoss{capture.StackMapFull, capture.StackHashCollision, capture.StackCaptureFailed}

// Linux errno values, as the programs store them negated in stack ids.
const (
	errnoE2BIG  = 7
	errnoEEXIST = 17
)

// stackLoss classifies a stack id of a counts key the way the programs
// count it (count_stack_loss in bpf/stackstore.h): -1 is no stack to take,
// -E2BIG a full stack map, -EEXIST a hash collision, any other negative
// value a failed capture.
func stackLoss(id int32) capture.StackLoss {
	switch {
	case id >= -1:
		return capture.StackKept
	case id == -errnoE2BIG:
		return capture.StackMapFull
	case id == -errnoEEXIST:
		return capture.StackHashCollision
	default:
		return capture.StackCaptureFailed
	}
}

// addCounters sums one CPU's counters into st.
func addCounters(st *capture.Stats, c counters) {
	st.Recorded += c.Recorded
	st.LostMapFull += c.LostMapFull
	for i, loss := range bpfStackLoss {
		st.UserStackLost[loss] += c.UserStackLost[i]
		st.KernelStackLost[loss] += c.KernelStackLost[i]
	}
	st.NewProcessDrops += c.NewPidDrops
	for i := range st.UnwindEnds {
		st.UnwindEnds[i] += c.UnwindEnds[i]
	}
	st.UnwindFrames += c.UnwindFrames
	// The rows of the runtimes walked apart (bpf/apart.h).
	python := runtimeWalks(c, capture.CPython)
	for i := range st.PythonEnds {
		st.PythonEnds[i] += python.Ends[i]
	}
	st.PythonFrames += python.Frames
	st.PythonStackLost += python.StackLost
	st.RubyWalks = st.RubyWalks.Add(runtimeWalks(c, capture.Ruby))
	st.PHPWalks = st.PHPWalks.Add(runtimeWalks(c, capture.PHP))
	// The OTEP's outcomes, then Go labels' (bpf/common.h).
	otep := len(st.ThreadContexts.Outcomes)
	for i := range st.ThreadContexts.Outcomes {
		st.ThreadContexts.Outcomes[i] += c.ThreadCtx[i]
	}
	for i := range st.GoLabels.Outcomes {
		st.GoLabels.Outcomes[i] += c.ThreadCtx[otep+i]
	}
	st.ThreadContexts.AttrsTruncated += c.ThreadCtxAttrsTruncated
	st.ThreadContexts.AttrsLost += c.ThreadCtxAttrsLost
	st.GoLabels.Truncated += c.GoLabelsTruncated
	st.GoLabels.Lost += c.GoLabelsLost
}

// runtimeWalks is the row of runtime rt in one CPU's counters.
func runtimeWalks(c counters, rt capture.Runtime) capture.RuntimeWalks {
	w := capture.RuntimeWalks{Frames: c.RuntimeFrames[rt], StackLost: c.RuntimeStackLost[rt]}
	for i := range w.Ends {
		w.Ends[i] = c.RuntimeEnds[rt][i]
	}
	return w
}

// trimStack copies the frames of a stack-trace map value up to the first
// zero entry (the programs store frames zero-padded).
func trimStack(frames []uint64) []uint64 {
	n := slices.Index(frames, 0)
	if n < 0 {
		n = len(frames)
	}
	if n == 0 {
		return nil
	}
	return slices.Clone(frames[:n])
}

// commString converts a NUL-padded kernel comm to a string.
func commString[T ~int8 | ~uint8](comm []T) string {
	b := make([]byte, 0, len(comm))
	for _, c := range comm {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// assembleSamples joins drained counts with their stacks (already trimmed,
// keyed by stack id) and thread names. A negative stack id means no stack:
// -1 none to take, others a loss counted in BPF (see stackLoss). A
// non-negative id absent from stacks yields a StackMissing loss, counted in
// the returned user and kernel losses: by value when countsAreSamples, else
// by entry. The result is sorted by pid, tid, then descending value.
func assembleSamples(counts map[stackKey]uint64, stacks map[int32][]uint64, comms map[uint32]string, countsAreSamples bool) (samples []capture.RawStack, userMissing, kernelMissing uint64) {
	samples = make([]capture.RawStack, 0, len(counts))
	for k, n := range counts {
		if n == 0 {
			continue
		}
		s := capture.RawStack{PID: k.Pid, TID: k.Tid, Comm: comms[k.Tid], Value: n}
		missing := uint64(1)
		if countsAreSamples {
			missing = n
		}
		user, userLoss := stackFor(stacks, k.UserStackId)
		s.UserLoss = userLoss
		if s.UserLoss == capture.StackMissing {
			userMissing += missing
		}
		kernel, kernelLoss := stackFor(stacks, k.KernelStackId)
		s.KernelLoss = kernelLoss
		if s.KernelLoss == capture.StackMissing {
			kernelMissing += missing
		}
		s.Frames = capture.StackFrames(kernel, user)
		// The frames of a runtime walked apart (bpf/apart.h) are an
		// addition: without them the sample keeps its native frames (their
		// loss is counted in BPF).
		if words, loss := stackFor(stacks, k.RuntimeStackId); loss == capture.StackKept {
			s.Frames = append(s.Frames, capture.RuntimeFrames(capture.Runtime(k.Runtime), words)...)
		}
		if probe := k.ScopeProbe &^ scopemap.GoroutineBit; probe > 0 {
			s.Scope = &capture.ScopeRef{ProbeIndex: int(probe) - 1, Start: k.ScopeStartNs,
				Goroutine: k.ScopeProbe&scopemap.GoroutineBit != 0}
		}
		if k.TraceId != ([16]uint8{}) {
			s.Trace = &capture.TraceContext{TraceID: k.TraceId, SpanID: k.SpanId, AttrsID: k.TraceAttrsId}
		}
		if k.GoLabelsId != 0 {
			s.GoLabels = &capture.GoLabels{ID: k.GoLabelsId}
		}
		samples = append(samples, s)
	}
	slices.SortFunc(samples, func(a, b capture.RawStack) int {
		return cmp.Or(
			cmp.Compare(a.PID, b.PID),
			cmp.Compare(a.TID, b.TID),
			cmp.Compare(b.Value, a.Value),
			slices.CompareFunc(a.Frames, b.Frames, compareFrames),
			cmp.Compare(a.UserLoss, b.UserLoss),
			cmp.Compare(a.KernelLoss, b.KernelLoss),
			compareScopes(a.Scope, b.Scope),
			compareTraces(a.Trace, b.Trace),
			cmp.Compare(goLabelsID(a.GoLabels), goLabelsID(b.GoLabels)),
		)
	})
	return samples, userMissing, kernelMissing
}

// UnpackAttrs returns the attribute bytes bpf/threadctx.h stored in words
// (a thread_ctx_attrs value): their count in the first word, marked by its
// top bit, then the bytes, 8 a word in memory order (both targets are
// little endian); nil when the words are not such. Words past the count's
// may hold anything.
func UnpackAttrs(words []uint64) []byte {
	const mark = 1 << 63
	if len(words) == 0 || words[0]&mark == 0 {
		return nil
	}
	n := words[0] &^ mark
	if n > 8*uint64(len(words)-1) {
		return nil
	}
	out := make([]byte, 0, (n+7)&^7)
	for _, w := range words[1 : 1+(n+7)/8] {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out[:n]
}

// compareScopes orders samples outside probe scopes first, then by probe and start.
func compareScopes(a, b *capture.ScopeRef) int {
	switch {
	case a == nil || b == nil:
		return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
	default:
		return cmp.Or(cmp.Compare(a.ProbeIndex, b.ProbeIndex), cmp.Compare(a.Start, b.Start))
	}
}

// compareTraces orders samples without thread context first, then by ids and attributes.
func compareTraces(a, b *capture.TraceContext) int {
	switch {
	case a == nil || b == nil:
		return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
	default:
		return cmp.Or(slices.Compare(a.TraceID[:], b.TraceID[:]), slices.Compare(a.SpanID[:], b.SpanID[:]), cmp.Compare(a.AttrsID, b.AttrsID))
	}
}

// goLabelsID orders samples without Go labels first.
func goLabelsID(l *capture.GoLabels) int64 {
	if l == nil {
		return -1
	}
	return int64(l.ID)
}

// compareFrames orders frames by kind, then address.
func compareFrames(a, b capture.Frame) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Runtime, b.Runtime), cmp.Compare(a.Address, b.Address),
		cmp.Compare(a.Position, b.Position), cmp.Compare(boolInt(a.Entry), boolInt(b.Entry)))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stackFor returns the stack with the given id, or why there is none.
func stackFor(stacks map[int32][]uint64, id int32) ([]uint64, capture.StackLoss) {
	if id < 0 {
		return nil, stackLoss(id)
	}
	frames, ok := stacks[id]
	if !ok {
		return nil, capture.StackMissing
	}
	return frames, capture.StackKept
}

// quiescent reports whether every CPU finished the program invocation that
// was running (if any) when before was read: either nothing was running then
// (enter == exit) or exit has since caught up with that enter.
func quiescent(before, now []inflightSeq) bool {
	for i, b := range before {
		if b.Enter == b.Exit {
			continue
		}
		if i >= len(now) || now[i].Exit < b.Enter {
			return false
		}
	}
	return true
}
