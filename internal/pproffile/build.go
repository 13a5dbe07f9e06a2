// Package pproffile writes reports as gzipped pprof profiles readable by
// `go tool pprof`, one file per profile kind per report.
package pproffile

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// KernelMappingFile is the file name of the single mapping that holds every
// kernel frame, as Linux perf names it.
const KernelMappingFile = "[kernel.kallsyms]"

// Sample label keys.
const (
	labelPID = "pid"
	labelTID = "tid"
	// labelSpanID is the span id (hex) of the probe scope a sample was
	// taken in (report.ScopeLink), beside its probe.id label.
	labelSpanID = "span_id"
	// labelTraceID is the trace id (hex) of the span of a sample's thread
	// context (report.TraceLink), whose span id labelSpanID then holds.
	labelTraceID = "trace_id"
)

// Build converts a report into a pprof profile holding every process: the
// process identity becomes sample labels, inlined frames are folded into the
// location of the frame they were inlined into (innermost line first).
func Build(p report.Profile) (*profile.Profile, error) {
	b := newBuilder()
	prof := b.prof
	typ, unit := p.Kind.SampleType()
	prof.SampleType = []*profile.ValueType{{Type: typ, Unit: unit}}
	switch p.Kind {
	case report.KindCPU:
		// pprof's CPU convention: samples, and the time they stand for in
		// the period's unit, the default view.
		ptyp, punit := p.Kind.PeriodType()
		prof.SampleType = append(prof.SampleType, &profile.ValueType{Type: ptyp, Unit: punit})
		prof.DefaultSampleType = ptyp
		prof.PeriodType = &profile.ValueType{Type: ptyp, Unit: punit}
		prof.Period = p.Period
	case report.KindOffCPU, report.KindProbeDuration:
	case report.KindAllocObjects, report.KindAllocSpace, report.KindInuseObjects, report.KindInuseSpace:
		ptyp, punit := p.Kind.PeriodType()
		prof.PeriodType = &profile.ValueType{Type: ptyp, Unit: punit}
		prof.Period = p.Period
	default:
		return nil, fmt.Errorf("unknown profile kind %q", p.Kind)
	}
	if !p.Start.IsZero() {
		prof.TimeNanos = p.Start.UnixNano()
		if d := p.End.Sub(p.Start); d > 0 {
			prof.DurationNanos = int64(d)
		}
	}

	for pi := range p.Processes {
		proc := &p.Processes[pi]
		labels := processLabels(proc.Identity)
		for si := range proc.Samples {
			s := &proc.Samples[si]
			ps := &profile.Sample{
				Location: b.locations(proc.Identity.PID, s.Frames),
				NumLabel: map[string][]int64{labelPID: {int64(proc.Identity.PID)}, labelTID: {int64(s.TID)}},
				Label:    maps.Clone(labels),
			}
			if s.ThreadName != "" {
				ps.Label[attrkey.ThreadName] = []string{s.ThreadName}
			}
			if s.Link != nil {
				ps.Label[labelSpanID] = []string{hex.EncodeToString(s.Link.SpanID[:])}
				ps.Label[attrkey.ProbeID] = []string{s.Link.ProbeID}
			}
			if s.Trace != nil {
				// The thread context's span, the SDK's own view, wins the
				// span_id label; the probe scope keeps its own.
				if s.Link != nil {
					ps.Label[attrkey.ProbeScopeSpanID] = ps.Label[labelSpanID]
				}
				ps.Label[labelTraceID] = []string{hex.EncodeToString(s.Trace.TraceID[:])}
				ps.Label[labelSpanID] = []string{hex.EncodeToString(s.Trace.SpanID[:])}
			}
			for k, v := range s.Attributes { // the record's attributes, or the goroutine's labels
				if _, ours := ps.Label[k]; !ours {
					ps.Label[k] = []string{v}
				}
			}
			if p.ProbeID != "" {
				ps.Label[attrkey.ProbeID] = []string{p.ProbeID}
			}
			if p.Kind == report.KindCPU {
				ps.Value = []int64{s.Value, s.Value * p.Period}
			} else {
				ps.Value = []int64{s.Value}
			}
			prof.Sample = append(prof.Sample, ps)
		}
	}
	b.orderMappings(p.Processes)
	if err := prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("build %s pprof profile: %w", p.Kind, err)
	}
	return prof, nil
}

// processLabels returns the string labels shared by every sample of a
// process: its executable name and every string-valued resource attribute.
func processLabels(id report.Identity) map[string][]string {
	labels := map[string][]string{}
	for _, k := range slices.Sorted(maps.Keys(id.Attributes)) {
		if v, ok := id.Attributes[k].(string); ok && v != "" {
			labels[k] = []string{v}
		}
	}
	if _, ok := labels[attrkey.ProcessExecutableName]; !ok && id.ExeName != "" {
		labels[attrkey.ProcessExecutableName] = []string{id.ExeName}
	}
	return labels
}

type mappingKey struct {
	report.Mapping
	pid uint32 // set only for mappings without a file, which are per process
}

type functionKey struct{ name, file string }

// builder deduplicates mappings, functions and locations of one profile.
type builder struct {
	prof      *profile.Profile
	mappings  map[mappingKey]*profile.Mapping
	kernel    *profile.Mapping
	functions map[functionKey]*profile.Function
	locByKey  map[string]*profile.Location
	key       strings.Builder
}

func newBuilder() *builder {
	return &builder{
		prof:      &profile.Profile{},
		mappings:  map[mappingKey]*profile.Mapping{},
		functions: map[functionKey]*profile.Function{},
		locByKey:  map[string]*profile.Location{},
	}
}

// locations returns the locations of frames (leaf first), one per address
// with inlined frames folded in.
func (b *builder) locations(pid uint32, frames []report.Frame) []*profile.Location {
	var locs []*profile.Location
	start := 0
	for i, f := range frames {
		if f.Inlined && i != len(frames)-1 {
			continue
		}
		locs = append(locs, b.location(pid, frames[start:i+1]))
		start = i + 1
	}
	return locs
}

// location returns the location of one address: the inlined callees followed
// by the frame they were inlined into. Locations are shared when mapping,
// address and lines are the same.
func (b *builder) location(pid uint32, frames []report.Frame) *profile.Location {
	outer := frames[len(frames)-1]
	m := b.mapping(pid, outer)
	var lines []profile.Line
	for _, f := range frames {
		if f.Function == "" {
			continue
		}
		lines = append(lines, profile.Line{Function: b.function(f.Function, f.File), Line: f.Line})
	}

	b.key.Reset()
	var mid uint64
	if m != nil {
		mid = m.ID
	} else {
		fmt.Fprintf(&b.key, "pid=%d;", pid) // unmapped addresses are per process
	}
	fmt.Fprintf(&b.key, "%d:%x", mid, outer.Address)
	for _, l := range lines {
		fmt.Fprintf(&b.key, ";%d:%d", l.Function.ID, l.Line)
	}
	if loc, ok := b.locByKey[b.key.String()]; ok {
		return loc
	}
	loc := &profile.Location{
		ID:      uint64(len(b.prof.Location) + 1),
		Mapping: m,
		Address: outer.Address,
		Line:    lines,
	}
	if m != nil && len(lines) > 0 {
		m.HasFunctions = true
		for _, l := range lines {
			m.HasFilenames = m.HasFilenames || l.Function.Filename != ""
			m.HasLineNumbers = m.HasLineNumbers || l.Line > 0
		}
		m.HasInlineFrames = m.HasInlineFrames || len(lines) > 1
	}
	b.prof.Location = append(b.prof.Location, loc)
	b.locByKey[b.key.String()] = loc
	return loc
}

// mapping returns the mapping of frame f. Kernel frames share one mapping
// spanning every kernel address seen.
func (b *builder) mapping(pid uint32, f report.Frame) *profile.Mapping {
	if f.Type == report.FrameKernel || (f.Mapping != nil && f.Mapping.File == KernelMappingFile) {
		if b.kernel == nil {
			b.kernel = b.addMapping(&profile.Mapping{File: KernelMappingFile, Start: f.Address, Limit: f.Address + 1})
			if f.Mapping != nil && f.Mapping.BuildIDGNU != "" {
				b.kernel.BuildID = f.Mapping.BuildIDGNU
			}
		}
		b.kernel.Start = min(b.kernel.Start, f.Address)
		b.kernel.Limit = max(b.kernel.Limit, f.Address+1)
		return b.kernel
	}
	if f.Mapping == nil {
		return nil
	}
	k := mappingKey{Mapping: *f.Mapping}
	if f.Mapping.File == "" {
		k.pid = pid
	}
	if m, ok := b.mappings[k]; ok {
		return m
	}
	buildID := f.Mapping.BuildIDGNU
	if buildID == "" {
		buildID = f.Mapping.BuildIDGo
	}
	m := b.addMapping(&profile.Mapping{
		Start:   f.Mapping.Start,
		Limit:   f.Mapping.Limit,
		Offset:  f.Mapping.Offset,
		File:    f.Mapping.File,
		BuildID: buildID,
	})
	b.mappings[k] = m
	return m
}

func (b *builder) addMapping(m *profile.Mapping) *profile.Mapping {
	m.ID = uint64(len(b.prof.Mapping) + 1)
	b.prof.Mapping = append(b.prof.Mapping, m)
	return m
}

// orderMappings puts the executable of the first process first and the
// kernel last: pprof presents the first mapping as the profiled binary.
func (b *builder) orderMappings(procs []report.Process) {
	var exe string
	if len(procs) > 0 {
		exe = procs[0].Identity.ExePath
	}
	rank := func(m *profile.Mapping) int {
		switch {
		case m == b.kernel:
			return 2
		case exe != "" && m.File == exe:
			return 0
		}
		return 1
	}
	slices.SortStableFunc(b.prof.Mapping, func(x, y *profile.Mapping) int { return rank(x) - rank(y) })
	for i, m := range b.prof.Mapping {
		m.ID = uint64(i + 1)
	}
}

func (b *builder) function(name, file string) *profile.Function {
	k := functionKey{name, file}
	if fn, ok := b.functions[k]; ok {
		return fn
	}
	fn := &profile.Function{
		ID:         uint64(len(b.prof.Function) + 1),
		Name:       name,
		SystemName: name,
		Filename:   file,
	}
	b.prof.Function = append(b.prof.Function, fn)
	b.functions[k] = fn
	return fn
}
