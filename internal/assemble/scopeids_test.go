package assemble

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every scope instance gets its own ids, the same each time it is asked
// for, and another receiver's seed gives other ids.
func TestScopeIDs(t *testing.T) {
	ids, other := NewScopeIDs(), NewScopeIDs()
	type scope struct {
		pid, tid uint32
		probe    int
		start    uint64
	}
	scopes := []scope{
		{10, 10, 0, 1000}, {10, 10, 0, 1001}, {10, 11, 0, 1000}, {11, 10, 0, 1000}, {10, 10, 1, 1000},
	}
	traces, spans := map[[16]byte]bool{}, map[[8]byte]bool{}
	for _, s := range scopes {
		trace, span := ids.Of(s.pid, s.tid, s.probe, s.start)
		again, spanAgain := ids.Of(s.pid, s.tid, s.probe, s.start)
		require.Equal(t, trace, again)
		require.Equal(t, span, spanAgain)
		require.NotEqual(t, [16]byte{}, trace)
		require.NotEqual(t, [8]byte{}, span)
		traces[trace], spans[span] = true, true
		otherTrace, otherSpan := other.Of(s.pid, s.tid, s.probe, s.start)
		require.NotEqual(t, trace, otherTrace)
		require.NotEqual(t, span, otherSpan)
	}
	require.Len(t, traces, len(scopes), "a trace id per scope instance")
	require.Len(t, spans, len(scopes), "a span id per scope instance")
}
