package assemble

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// ScopeIDs gives each probe scope instance a trace id and a span id,
// derived from what identifies the instance (process, thread, probe, start
// time in kernel nanoseconds) and a seed drawn once per receiver: anything
// that knows the scope (its log record, a sample taken inside it) gets the
// same ids, and two receivers (or one restarted) never give the same ones.
type ScopeIDs struct{ seed [16]byte }

// NewScopeIDs returns ScopeIDs with a random seed.
func NewScopeIDs() ScopeIDs {
	var ids ScopeIDs
	_, _ = rand.Read(ids.seed[:]) // never fails (crypto/rand panics instead)
	return ids
}

// Of returns the trace and span id of the scope of probe probeIndex that
// thread tid of process pid entered at start; neither is all zeros (an
// invalid id in OTLP).
func (ids ScopeIDs) Of(pid, tid uint32, probeIndex int, start uint64) (trace [16]byte, span [8]byte) {
	var in [16 + 4 + 4 + 8 + 8]byte
	copy(in[:], ids.seed[:])
	binary.LittleEndian.PutUint32(in[16:], pid)
	binary.LittleEndian.PutUint32(in[20:], tid)
	binary.LittleEndian.PutUint64(in[24:], uint64(probeIndex))
	binary.LittleEndian.PutUint64(in[32:], start)
	sum := sha256.Sum256(in[:])
	copy(trace[:], sum[:16])
	copy(span[:], sum[16:24])
	if trace == [16]byte{} {
		trace[0] = 1
	}
	if span == [8]byte{} {
		span[0] = 1
	}
	return trace, span
}
