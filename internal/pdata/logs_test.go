package pdata

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

func TestBuildProbeLogs(t *testing.T) {
	observed := time.Unix(1700000001, 0)
	node := report.Identity{PID: 42, ExeName: "node", ExePath: "/usr/bin/node", Attributes: map[string]any{
		"process.pid": int64(42), "k8s.pod.name": "web-1",
	}}
	rec := report.ScopeRecord{
		TraceID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  [8]byte{0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 1, 2},
		ProbeID: "node.callback_scope", EntrySymbol: "ctor", ExitSymbol: "dtor",
		Start: 1700000000_000000000, End: 1700000000_200000000,
		TID: 42, ThreadName: "node", MainThread: true,
	}
	tests := []struct {
		name      string
		processes []report.ProcessScopes
		resources int
		records   int
	}{
		{name: "nothing"},
		{name: "process without records", processes: []report.ProcessScopes{{Identity: node}}},
		{name: "one record", processes: []report.ProcessScopes{{Identity: node, Records: []report.ScopeRecord{rec}}}, resources: 1, records: 1},
		{
			name: "two processes",
			processes: []report.ProcessScopes{
				{Identity: node, Records: []report.ScopeRecord{rec, rec}},
				{Identity: report.Identity{PID: 7}, Records: []report.ScopeRecord{rec}},
			},
			resources: 2, records: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs, err := BuildProbeLogs(Scope{Name: "scope", Version: "v1"}, observed, tt.processes...)
			require.NoError(t, err)
			assert.Equal(t, tt.resources, logs.ResourceLogs().Len())
			assert.Equal(t, tt.records, logs.LogRecordCount())
		})
	}

	logs, err := BuildProbeLogs(Scope{Name: "scope"}, observed, report.ProcessScopes{Identity: node, Records: []report.ScopeRecord{rec}})
	require.NoError(t, err)
	rl := logs.ResourceLogs().At(0)
	assert.Equal(t, map[string]any{
		"process.pid": int64(42), "k8s.pod.name": "web-1",
		"process.executable.name": "node", "process.executable.path": "/usr/bin/node",
	}, rl.Resource().Attributes().AsRaw())
	assert.Equal(t, "scope", rl.ScopeLogs().At(0).Scope().Name())
	lr := rl.ScopeLogs().At(0).LogRecords().At(0)
	assert.Equal(t, "node.callback_scope", lr.Body().Str())
	assert.Equal(t, ProbeEventName, lr.EventName())
	assert.Equal(t, "0102030405060708090a0b0c0d0e0f10", lr.TraceID().String())
	assert.Equal(t, "0a0b0c0d0e0f0102", lr.SpanID().String())
	assert.Equal(t, uint64(1700000000_200000000), uint64(lr.Timestamp()))
	assert.Equal(t, observed.UnixNano(), lr.ObservedTimestamp().AsTime().UnixNano())
	assert.Equal(t, map[string]any{
		"probe.id":                   "node.callback_scope",
		"probe.duration_ns":          int64(200000000),
		"probe.start_time_unix_nano": int64(1700000000_000000000),
		"thread.id":                  int64(42),
		"thread.name":                "node",
		"probe.main_thread":          true,
		"probe.entry_symbol":         "ctor",
		"probe.exit_symbol":          "dtor",
	}, lr.Attributes().AsRaw())

	// A USDT probe's record names its two USDT probes instead of symbols.
	pg := rec
	pg.EntrySymbol, pg.ExitSymbol = "", ""
	pg.EntryUSDT, pg.ExitUSDT = "postgresql:query__start", "postgresql:query__done"
	logs4, err := BuildProbeLogs(Scope{Name: "scope"}, observed, report.ProcessScopes{Identity: node, Records: []report.ScopeRecord{pg}})
	require.NoError(t, err)
	attrs4 := logs4.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().AsRaw()
	assert.Equal(t, "postgresql:query__start", attrs4["probe.usdt_entry"])
	assert.Equal(t, "postgresql:query__done", attrs4["probe.usdt_exit"])
	assert.NotContains(t, attrs4, "probe.entry_symbol")
	assert.NotContains(t, attrs4, "probe.exit_symbol")

	// Its arguments, typed as their attributes say.
	pg.Args = []report.ScopeArg{{Key: "db.query.text", Str: "select 1", IsString: true}, {Key: "rows", Int: -3}}
	logs5, err := BuildProbeLogs(Scope{Name: "scope"}, observed, report.ProcessScopes{Identity: node, Records: []report.ScopeRecord{pg}})
	require.NoError(t, err)
	attrs5 := logs5.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().AsRaw()
	assert.Equal(t, "select 1", attrs5["db.query.text"])
	assert.Equal(t, int64(-3), attrs5["rows"])
	assert.Len(t, attrs5, len(attrs4)+2)

	// A Go function's record carries its goroutine's labels, never over
	// its own attributes.
	labelled := rec
	labelled.Labels = map[string]string{"request": "17", "thread.id": "label"}
	logs3, err := BuildProbeLogs(Scope{Name: "scope"}, observed, report.ProcessScopes{Identity: node, Records: []report.ScopeRecord{labelled}})
	require.NoError(t, err)
	attrs := logs3.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().AsRaw()
	assert.Equal(t, "17", attrs["request"])
	assert.Equal(t, int64(42), attrs["thread.id"])

	// A record read earlier than the batch was built keeps its read time.
	read := rec
	read.Observed = 1700000000_300000000
	logs2, err := BuildProbeLogs(Scope{Name: "scope"}, observed, report.ProcessScopes{Identity: node, Records: []report.ScopeRecord{read}})
	require.NoError(t, err)
	assert.Equal(t, uint64(1700000000_300000000), uint64(logs2.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).ObservedTimestamp()))

	// Survives a proto round trip.
	b, err := (&plog.ProtoMarshaler{}).MarshalLogs(logs)
	require.NoError(t, err)
	back, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(b)
	require.NoError(t, err)
	assert.Equal(t, logs.LogRecordCount(), back.LogRecordCount())
	assert.Equal(t, ProbeEventName, back.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).EventName())
}
