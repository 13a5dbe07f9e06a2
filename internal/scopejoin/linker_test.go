package scopejoin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

var t0 = time.Unix(1_700_000_000, 0)

// fakeIDs gives ids that spell the scope out.
func fakeIDs(pid, tid uint32, probe int, start uint64) (trace [16]byte, span [8]byte) {
	trace[0], trace[1], trace[2] = byte(pid), byte(tid), byte(probe)
	span[0] = byte(start)
	return trace, span
}

func newTestLinker(maxHeld int) *Linker {
	return New(Options{IDs: fakeIDs, Probes: []string{"slow", "other"}, Reports: 2, MaxHeld: maxHeld, MaxRecords: 100})
}

func sample(tid uint32, probe int, start uint64, value int64) report.Sample {
	s := report.Sample{TID: tid, Value: value}
	if probe >= 0 {
		s.Scope = &report.SampleScope{ProbeIndex: probe, Start: start}
	}
	return s
}

func cpuProfile(samples ...report.Sample) []report.Profile {
	return []report.Profile{{Kind: report.KindCPU, Period: 10, Processes: []report.Process{
		{Identity: report.Identity{PID: 7}, Samples: samples},
	}}}
}

func record(tid uint32, probe int, start uint64) capture.RawScope {
	return capture.RawScope{PID: 7, TID: tid, ProbeIndex: probe, Start: start, End: start + 1}
}

// linkOf is the link a sample of scope (tid, probe, start) of pid 7 gets.
func linkOf(tid uint32, probe int, start uint64, id string) *report.ScopeLink {
	trace, span := fakeIDs(7, tid, probe, start)
	return &report.ScopeLink{TraceID: trace, SpanID: span, ProbeID: id}
}

func TestLinker(t *testing.T) {
	l := newTestLinker(10)
	l.Completed([]capture.RawScope{record(8, 0, 100), record(9, 0, 300)})

	// Report 1: linked (record known), no record (a later scope of the
	// probe on the thread has one), held (its scope may still be open),
	// plain samples untouched.
	got, out := l.Link(t0.Add(time.Second), cpuProfile(
		sample(8, 0, 100, 5),
		sample(9, 0, 200, 4),
		sample(9, 0, 400, 3),
		sample(8, -1, 0, 2),
	), false)
	require.Len(t, got, 1)
	assert.Equal(t, []report.Sample{
		{TID: 8, Value: 5, Link: linkOf(8, 0, 100, "slow")},
		{TID: 9, Value: 4},
		{TID: 8, Value: 2},
	}, got[0].Processes[0].Samples)
	assert.Equal(t, Outcomes{0: {Linked: 1, NoRecord: 1}}, out)
	assert.Equal(t, 1, l.Held())

	// Report 2: the held sample's record came; it is put back, linked,
	// into this report's profile of its kind.
	l.Completed([]capture.RawScope{record(9, 0, 400)})
	got, out = l.Link(t0.Add(3*time.Second), cpuProfile(sample(8, -1, 0, 1)), false)
	assert.Equal(t, []report.Sample{
		{TID: 8, Value: 1},
		{TID: 9, Value: 3, Link: linkOf(9, 0, 400, "slow")},
	}, got[0].Processes[0].Samples)
	assert.Equal(t, Outcomes{0: {Linked: 1}}, out)
	assert.Zero(t, l.Held())
}

func TestLinkerTimeout(t *testing.T) {
	l := newTestLinker(10)
	_, out := l.Link(t0, cpuProfile(sample(8, 1, 100, 5)), false)
	assert.Empty(t, out)
	// One report later it stays held; no profile comes back without it.
	got, out := l.Link(t0.Add(time.Hour), nil, false)
	assert.Empty(t, got)
	assert.Empty(t, out)
	// At the second report it comes back unlinked, in a profile of its kind
	// added for it (counted in reports: the time between them is no matter).
	got, out = l.Link(t0.Add(time.Hour+time.Second), nil, false)
	require.Len(t, got, 1)
	assert.Equal(t, report.KindCPU, got[0].Kind)
	assert.Equal(t, int64(10), got[0].Period)
	assert.Equal(t, []report.Process{{Identity: report.Identity{PID: 7}, Samples: []report.Sample{{TID: 8, Value: 5}}}}, got[0].Processes)
	assert.Equal(t, Outcomes{1: {Timeout: 1}}, out)
}

func TestLinkerBounds(t *testing.T) {
	l := newTestLinker(1)
	got, out := l.Link(t0, cpuProfile(sample(8, 0, 100, 5), sample(8, 0, 200, 4)), false)
	assert.Equal(t, []report.Sample{{TID: 8, Value: 4}}, got[0].Processes[0].Samples, "the second finds no room")
	assert.Equal(t, Outcomes{0: {HeldFull: 1}}, out)

	// final: nothing stays held.
	got, out = l.Link(t0, nil, true)
	assert.Equal(t, []report.Sample{{TID: 8, Value: 5}}, got[0].Processes[0].Samples)
	assert.Equal(t, Outcomes{0: {Timeout: 1}}, out)

	// Records are forgotten beyond MaxRecords, oldest first.
	l = New(Options{IDs: fakeIDs, Reports: 2, MaxHeld: 10, MaxRecords: 2})
	l.Completed([]capture.RawScope{record(1, 0, 1), record(2, 0, 1), record(3, 0, 1)})
	_, out = l.Link(t0, []report.Profile{{Kind: report.KindCPU, Processes: []report.Process{{
		Identity: report.Identity{PID: 7},
		Samples:  []report.Sample{sample(1, 0, 1, 1), sample(2, 0, 1, 1), sample(3, 0, 1, 1)},
	}}}}, false)
	assert.Equal(t, Outcomes{0: {Linked: 2}}, out, "the oldest record was forgotten: its sample waits")
}

// A record is remembered for the reports a held sample may wait and one
// more, then forgotten.
func TestLinkerRecordsKeptForReports(t *testing.T) {
	l := newTestLinker(10)
	l.Completed([]capture.RawScope{record(8, 0, 100)})
	for range 2 {
		_, out := l.Link(t0, nil, false)
		assert.Empty(t, out)
	}
	// Third report since it arrived: still known.
	_, out := l.Link(t0, cpuProfile(sample(8, 0, 100, 1)), false)
	assert.Equal(t, Outcomes{0: {Linked: 1}}, out)
	// Fourth: forgotten; the sample waits (and times out two reports later).
	_, out = l.Link(t0, cpuProfile(sample(8, 0, 100, 1)), false)
	assert.Empty(t, out)
	assert.Equal(t, 1, l.Held())
}

func TestDurations(t *testing.T) {
	d := NewDurations(2)
	scope := func(tid uint32, probe int, ns uint64, stack ...uint64) capture.RawScope {
		return capture.RawScope{PID: 7, TID: tid, ProbeIndex: probe, Start: 1000, End: 1000 + ns, EntryStack: stack}
	}
	lost := scope(8, 1, 7)
	lost.EntryStackLoss = capture.StackMissing
	dropped := d.Add([]capture.RawScope{
		scope(8, 0, 30, 0x10, 0x20),
		scope(8, 0, 10, 0x10, 0x20),
		scope(8, 0, 99), // no entry stack kept: not counted
		lost,
		scope(8, 0, 5, 0x30), // a third entry: no room
	})
	assert.Equal(t, map[int]int{0: 1}, dropped)
	got := d.Drain()
	assert.Equal(t, map[int][]capture.RawStack{
		0: {{PID: 7, TID: 8, Frames: capture.StackFrames(nil, []uint64{0x10, 0x20}), Value: 40}},
		1: {{PID: 7, TID: 8, UserLoss: capture.StackMissing, Value: 7}},
	}, got)
	assert.Empty(t, d.Drain())
}

// A goroutine's scope links samples of any thread to its record, which
// names the thread the scope ended on; a later record on the sample's
// thread says nothing about it, so it waits for its own or times out.
func TestLinkerGoroutineScopes(t *testing.T) {
	goroutine := func(tid uint32, start uint64, value int64) report.Sample {
		s := sample(tid, 0, start, value)
		s.Scope.Goroutine = true
		return s
	}
	for _, tt := range []struct {
		name    string
		records []capture.RawScope
		sample  report.Sample
		want    report.Sample // linked; zero: held, then timed out
		held    bool
	}{
		{"on the thread its record names", []capture.RawScope{record(8, 0, 100)}, goroutine(8, 100, 5),
			report.Sample{TID: 8, Value: 5, Link: linkOf(8, 0, 100, "slow")}, false},
		{"on another thread", []capture.RawScope{record(8, 0, 100)}, goroutine(9, 100, 5),
			report.Sample{TID: 9, Value: 5, Link: linkOf(8, 0, 100, "slow")}, false},
		{"a later record on its thread", []capture.RawScope{record(9, 0, 300)}, goroutine(9, 100, 5),
			report.Sample{}, true},
		{"another process's record", []capture.RawScope{{PID: 6, TID: 8, Start: 100, End: 101}}, goroutine(8, 100, 5),
			report.Sample{}, true},
		{"another probe's record", []capture.RawScope{record(8, 1, 100)}, goroutine(8, 100, 5),
			report.Sample{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLinker(10)
			l.Completed(tt.records)
			got, out := l.Link(t0, cpuProfile(tt.sample), false)
			if tt.held {
				require.Equal(t, 1, l.Held())
				require.Empty(t, out)
				// Never a record: it times out after Options.Reports reports.
				_, out = l.Link(t0.Add(time.Second), nil, false)
				require.Empty(t, out)
				got, out = l.Link(t0.Add(2*time.Second), nil, false)
				require.Equal(t, Outcomes{0: {Timeout: 1}}, out)
				require.Equal(t, []report.Sample{{TID: tt.sample.TID, Value: tt.sample.Value}}, got[0].Processes[0].Samples)
				return
			}
			require.Zero(t, l.Held())
			require.Equal(t, Outcomes{0: {Linked: 1}}, out)
			require.Equal(t, []report.Sample{tt.want}, got[0].Processes[0].Samples)
		})
	}
}
