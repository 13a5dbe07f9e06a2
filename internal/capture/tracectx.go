package capture

// TraceContext is the OpenTelemetry thread context the thread of a sample
// had published (OTEP 4947) when the sample was taken.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Attrs is the record's attrs-data as published (key index, length,
	// value, ...), cut to what BPF keeps (bpf/threadctx.h); nil: none.
	// AttrsID is where BPF keeps them (-1: none).
	Attrs   []byte
	AttrsID int32
}

// ThreadContextOutcome says what the read of a sample's thread context
// found (bpf/common.h, enum thread_ctx_outcome).
type ThreadContextOutcome uint8

const (
	ThreadContextLinked    ThreadContextOutcome = iota // a valid record: the sample is linked
	ThreadContextNone                                  // the pointer was NULL: no span
	ThreadContextInvalid                               // valid was not 1, or the trace id zero
	ThreadContextReadFault                             // the pointer or the record could not be read
	numThreadContextOutcomes
)

// ThreadContexts counts samples, indexed by ThreadContextOutcome.
type ThreadContexts [numThreadContextOutcomes]uint64

// AllThreadContextOutcomes lists every ThreadContextOutcome, in order.
var AllThreadContextOutcomes = []ThreadContextOutcome{ThreadContextLinked, ThreadContextNone, ThreadContextInvalid, ThreadContextReadFault}

// Reason is the outcome's telemetry attribute value.
func (o ThreadContextOutcome) Reason() string {
	return [...]string{"linked", "none", "invalid", "read_fault"}[o]
}

// ThreadContextStats count what the samplers read of thread contexts.
type ThreadContextStats struct {
	Outcomes ThreadContexts
	// AttrsTruncated counts records whose attributes were cut to what BPF
	// keeps; AttrsLost those whose attributes could not be read or stored.
	AttrsTruncated, AttrsLost uint64
}

// Add returns the sum of s and o.
func (s ThreadContextStats) Add(o ThreadContextStats) ThreadContextStats {
	for i := range s.Outcomes {
		s.Outcomes[i] += o.Outcomes[i]
	}
	s.AttrsTruncated += o.AttrsTruncated
	s.AttrsLost += o.AttrsLost
	return s
}
