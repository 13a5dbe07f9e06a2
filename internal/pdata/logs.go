package pdata

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// ProbeEventName is the event name of every probe log record.
const ProbeEventName = "bpfprofiler.probe"

// BuildProbeLogs turns completed probe scopes into one log record each, one
// ResourceLogs per process with its identity; observed is when they were
// read from the kernel, for records that do not say (ScopeRecord.Observed).
func BuildProbeLogs(scope Scope, observed time.Time, processes ...report.ProcessScopes) (plog.Logs, error) {
	logs := plog.NewLogs()
	for _, p := range processes {
		if len(p.Records) == 0 {
			continue
		}
		rl := logs.ResourceLogs().AppendEmpty()
		if err := putResourceAttributes(rl.Resource().Attributes(), p.Identity); err != nil {
			return plog.Logs{}, fmt.Errorf("resource of pid %d: %w", p.Identity.PID, err)
		}
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(scope.Name)
		sl.Scope().SetVersion(scope.Version)
		for _, r := range p.Records {
			putScopeRecord(sl.LogRecords().AppendEmpty(), r, observed)
		}
	}
	return logs, nil
}

func putScopeRecord(lr plog.LogRecord, r report.ScopeRecord, observed time.Time) {
	lr.SetEventName(ProbeEventName)
	lr.SetTraceID(pcommon.TraceID(r.TraceID))
	lr.SetSpanID(pcommon.SpanID(r.SpanID))
	lr.Body().SetStr(r.ProbeID)
	lr.SetTimestamp(pcommon.Timestamp(r.End))
	if r.Observed != 0 {
		lr.SetObservedTimestamp(pcommon.Timestamp(r.Observed))
	} else {
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(observed))
	}
	attrs := lr.Attributes()
	attrs.PutStr(attrkey.ProbeID, r.ProbeID)
	attrs.PutInt(attrkey.ProbeDurationNS, int64(r.End-r.Start))
	attrs.PutInt(attrkey.ProbeStartTime, int64(r.Start))
	attrs.PutInt(attrkey.ThreadID, int64(r.TID))
	attrs.PutStr(attrkey.ThreadName, r.ThreadName)
	attrs.PutBool(attrkey.ProbeMainThread, r.MainThread)
	if r.EntryUSDT != "" {
		attrs.PutStr(attrkey.ProbeUSDTEntry, r.EntryUSDT)
		attrs.PutStr(attrkey.ProbeUSDTExit, r.ExitUSDT)
	} else {
		attrs.PutStr(attrkey.ProbeEntry, r.EntrySymbol)
		attrs.PutStr(attrkey.ProbeExit, r.ExitSymbol)
	}
	for _, a := range r.Args {
		if a.IsString {
			attrs.PutStr(a.Key, a.Str)
		} else {
			attrs.PutInt(a.Key, a.Int)
		}
	}
	// Goroutine labels, keyed as written, as on samples; never over the
	// record's own attributes.
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		if _, ok := attrs.Get(k); !ok {
			attrs.PutStr(k, r.Labels[k])
		}
	}
}

// putResourceAttributes copies the identity attributes, typed, and fills the
// process attributes from the identity fields when they are missing.
func putResourceAttributes(attrs pcommon.Map, id report.Identity) error {
	attrs.EnsureCapacity(len(id.Attributes) + 3)
	for _, k := range slices.Sorted(maps.Keys(id.Attributes)) {
		if err := setValue(attrs.PutEmpty(k), id.Attributes[k]); err != nil {
			return fmt.Errorf("resource attribute %q: %w", k, err)
		}
	}
	if _, ok := attrs.Get(attrkey.ProcessPID); !ok {
		attrs.PutInt(attrkey.ProcessPID, int64(id.PID))
	}
	if _, ok := attrs.Get(attrkey.ProcessExecutableName); !ok && id.ExeName != "" {
		attrs.PutStr(attrkey.ProcessExecutableName, id.ExeName)
	}
	if _, ok := attrs.Get(attrkey.ProcessExecutablePath); !ok && id.ExePath != "" {
		attrs.PutStr(attrkey.ProcessExecutablePath, id.ExePath)
	}
	return nil
}
