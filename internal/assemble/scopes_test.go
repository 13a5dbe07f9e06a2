package assemble

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/clock"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func TestScopes(t *testing.T) {
	probes := []Probe{
		{ID: "fn", EntrySymbol: "f", ExitSymbol: "f"},
		{ID: "pair", EntrySymbol: "ctor", ExitSymbol: "dtor"},
	}
	ids := fakeIdentities{7: "seven", 3: "three"}
	raw := []capture.RawScope{
		{ProbeIndex: 1, PID: 7, TID: 8, Comm: "worker", Start: 1000, End: 5000},
		{ProbeIndex: 0, PID: 3, TID: 3, Comm: "main", Start: 2000, End: 2500},
		{ProbeIndex: 0, PID: 7, TID: 7, Comm: "seven", Start: 6000, End: 9000},
		{ProbeIndex: 2, PID: 3, TID: 3, Comm: "main", Start: 1, End: 2}, // no such probe
	}
	read := ReadScopes(ids, raw)
	require.Len(t, read, len(raw))
	require.NotZero(t, read[0].Observed)

	got := Scopes(probes, NewScopeIDs(), read)
	require.Len(t, got, 2)
	require.Equal(t, uint32(3), got[0].Identity.PID, "ordered by pid")
	require.Equal(t, "three", got[0].Identity.ExePath)
	require.Len(t, got[0].Records, 1, "the scope of an unknown probe is skipped")
	require.Equal(t, uint32(7), got[1].Identity.PID)

	off, err := clock.Offset()
	require.NoError(t, err)
	tests := []struct {
		proc, rec          int
		probe, entry, exit string
		tid                uint32
		thread             string
		main               bool
		start, end         uint64
	}{
		{0, 0, "fn", "f", "f", 3, "main", true, 2000, 2500},
		{1, 0, "pair", "ctor", "dtor", 8, "worker", false, 1000, 5000},
		{1, 1, "fn", "f", "f", 7, "seven", true, 6000, 9000},
	}
	for _, tt := range tests {
		r := got[tt.proc].Records[tt.rec]
		require.Equal(t, tt.probe, r.ProbeID)
		require.Equal(t, tt.entry, r.EntrySymbol)
		require.Equal(t, tt.exit, r.ExitSymbol)
		require.Equal(t, tt.tid, r.TID)
		require.Equal(t, tt.thread, r.ThreadName)
		require.Equal(t, tt.main, r.MainThread)
		require.Equal(t, uint64(int64(tt.start)+off), r.Start, "kernel time + the shared offset")
		require.Equal(t, uint64(int64(tt.end)+off), r.End)
		require.Equal(t, read[0].Observed, r.Observed)
	}
}

// A USDT probe's records name its two USDT probes.
func TestScopesUSDT(t *testing.T) {
	probes := []Probe{{ID: "pg.query", EntryUSDT: "postgresql:query__start", ExitUSDT: "postgresql:query__done"}}
	raw := []capture.RawScope{{ProbeIndex: 0, PID: 7, TID: 8, Start: 1000, End: 5000}}
	got := Scopes(probes, NewScopeIDs(), ReadScopes(fakeIdentities{7: "seven"}, raw))
	require.Len(t, got, 1)
	r := got[0].Records[0]
	require.Equal(t, "pg.query", r.ProbeID)
	require.Equal(t, "postgresql:query__start", r.EntryUSDT)
	require.Equal(t, "postgresql:query__done", r.ExitUSDT)
	require.Empty(t, r.EntrySymbol)
	require.Empty(t, r.ExitSymbol)
	require.Nil(t, r.Args)

	// Its arguments, named by its attributes in slot order; one not read
	// is left out.
	probes[0].Args = []ProbeArg{{Name: "n"}, {Name: "q", String: true}, {Name: "gone"}}
	raw[0].Args = []capture.ProbeArg{{Int: -5, Str: ""}, {Int: 9, Str: "select 1"}, {Failed: true}, {}}
	got = Scopes(probes, NewScopeIDs(), ReadScopes(fakeIdentities{7: "seven"}, raw))
	require.Equal(t, []report.ScopeArg{{Key: "n", Int: -5}, {Key: "q", Str: "select 1", IsString: true}}, got[0].Records[0].Args)
}
