package pdata

import (
	"maps"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
)

// FunctionTotals returns, for every function name, the sum of the first
// value of the samples whose stack contains that function (inlined frames
// included), counting each sample once per function. It sums over every
// profile in p, so callers pass profiles of one kind. Unsymbolized frames
// (no function, or one named for display only, see addressName) are not
// counted under any name.
func FunctionTotals(p pprofile.Profiles) map[string]int64 {
	totals := map[string]int64{}
	seen := map[string]bool{}
	forEachSample(p, func(dict pprofile.ProfilesDictionary, s pprofile.Sample, v int64) {
		clear(seen)
		forEachLocation(dict, s, func(loc pprofile.Location) bool {
			for _, l := range loc.Lines().All() {
				name := symbolName(dict, l.FunctionIndex())
				if name == "" || seen[name] {
					continue
				}
				seen[name] = true
				totals[name] += v
			}
			return true
		})
	})
	return totals
}

// LeafTotals returns, for every function name, the sum of the first value of
// the samples whose innermost frame (the first line of the leaf location) is
// that function. Samples with an unsymbolized leaf are not counted.
func LeafTotals(p pprofile.Profiles) map[string]int64 {
	totals := map[string]int64{}
	forEachSample(p, func(dict pprofile.ProfilesDictionary, s pprofile.Sample, v int64) {
		forEachLocation(dict, s, func(loc pprofile.Location) bool {
			if loc.Lines().Len() > 0 {
				if name := symbolName(dict, loc.Lines().At(0).FunctionIndex()); name != "" {
					totals[name] += v
				}
			}
			return false
		})
	})
	return totals
}

// Total returns the sum of the first value of every sample in p, the
// denominator for shares of FunctionTotals and LeafTotals.
func Total(p pprofile.Profiles) int64 {
	var total int64
	forEachSample(p, func(_ pprofile.ProfilesDictionary, _ pprofile.Sample, v int64) { total += v })
	return total
}

func forEachSample(p pprofile.Profiles, fn func(pprofile.ProfilesDictionary, pprofile.Sample, int64)) {
	forEachProfile(p, func(dict pprofile.ProfilesDictionary, prof pprofile.Profile) {
		for _, s := range prof.Samples().All() {
			if s.Values().Len() == 0 {
				continue
			}
			fn(dict, s, s.Values().At(0))
		}
	})
}

func forEachProfile(p pprofile.Profiles, fn func(pprofile.ProfilesDictionary, pprofile.Profile)) {
	dict := p.Dictionary()
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				fn(dict, prof)
			}
		}
	}
}

// OfType returns a copy of p holding only its profiles whose sample type is
// typ ("samples" for CPU profiles, "off_cpu").
func OfType(p pprofile.Profiles, typ string) pprofile.Profiles {
	out := pprofile.NewProfiles()
	p.CopyTo(out)
	dict := out.Dictionary()
	for _, rp := range out.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			sp.Profiles().RemoveIf(func(prof pprofile.Profile) bool {
				return stringAt(dict, prof.SampleType().TypeStrindex()) != typ
			})
		}
	}
	return out
}

// OfPID returns a copy of p holding only the samples of process pid (by
// the process.pid of their attributes or resource).
func OfPID(p pprofile.Profiles, pid int) pprofile.Profiles {
	out := pprofile.NewProfiles()
	p.CopyTo(out)
	dict := out.Dictionary()
	for _, rp := range out.ResourceProfiles().All() {
		resPID, hasResPID := rp.Resource().Attributes().Get(attrkey.ProcessPID)
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				prof.Samples().RemoveIf(func(s pprofile.Sample) bool {
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
					if err == nil {
						if v, ok := attrs.Get(attrkey.ProcessPID); ok {
							return v.Int() != int64(pid)
						}
					}
					return !hasResPID || resPID.Int() != int64(pid)
				})
			}
		}
	}
	return out
}

func stringAt(dict pprofile.ProfilesDictionary, i int32) string {
	if i < 0 || int(i) >= dict.StringTable().Len() {
		return ""
	}
	return dict.StringTable().At(int(i))
}

// forEachLocation calls fn for the locations of the stack of s, leaf first,
// until fn returns false. Out-of-range indices are skipped.
func forEachLocation(dict pprofile.ProfilesDictionary, s pprofile.Sample, fn func(pprofile.Location) bool) {
	stacks, locs := dict.StackTable(), dict.LocationTable()
	si := int(s.StackIndex())
	if si < 0 || si >= stacks.Len() {
		return
	}
	for _, li := range stacks.At(si).LocationIndices().All() {
		if li < 0 || int(li) >= locs.Len() {
			continue
		}
		if !fn(locs.At(int(li))) {
			return
		}
	}
}

// symbolName is the name of function fi when it is a symbol's, "" when it
// was made up for display (no system name, see addressName).
func symbolName(dict pprofile.ProfilesDictionary, fi int32) string {
	fns := dict.FunctionTable()
	if fi <= 0 || int(fi) >= fns.Len() || fns.At(int(fi)).SystemNameStrindex() == 0 {
		return ""
	}
	return functionName(dict, fi)
}

// functionName is the name of function fi, or "".
func functionName(dict pprofile.ProfilesDictionary, fi int32) string {
	fns, strs := dict.FunctionTable(), dict.StringTable()
	if fi <= 0 || int(fi) >= fns.Len() {
		return ""
	}
	ni := fns.At(int(fi)).NameStrindex()
	if ni < 0 || int(ni) >= strs.Len() {
		return ""
	}
	return strs.At(int(ni))
}

// fileName is the source file of function fi, or "".
func fileName(dict pprofile.ProfilesDictionary, fi int32) string {
	fns := dict.FunctionTable()
	if fi <= 0 || int(fi) >= fns.Len() {
		return ""
	}
	return stringAt(dict, fns.At(int(fi)).FilenameStrindex())
}

// frameType is the profile.frame.type attribute of loc, or "".
func frameType(dict pprofile.ProfilesDictionary, loc pprofile.Location) string {
	attrs := dict.AttributeTable()
	for _, ai := range loc.AttributeIndices().All() {
		if ai < 0 || int(ai) >= attrs.Len() {
			continue
		}
		a := attrs.At(int(ai))
		if stringAt(dict, a.KeyStrindex()) == attrkey.ProfileFrameType {
			return a.Value().Str()
		}
	}
	return ""
}

// NamedStack is the stack of one sample as function names, leaf first, one
// entry per line of each location (inlined frames included); "" stands for
// an unsymbolized frame. Frames has the same entries in full.
type NamedStack struct {
	Functions []string
	Frames    []NamedFrame
	Value     int64
	// Link is the sample's link (zero: none) and ProbeID its probe.id
	// attribute.
	Link    ScopeLink
	ProbeID string
	// Attributes are the sample's own attributes (the process's left out).
	Attributes map[string]any
}

// ScopeLink is the trace and span id a sample links to.
type ScopeLink struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID
}

// NamedFrame is one line of a location: its function, source file and line,
// and the location's profile.frame.type; for an unsymbolized one, the
// location's address and mapping file.
type NamedFrame struct {
	Function, File, Type string
	Line                 int64
	Address              uint64
	Mapping              string
}

// Stacks returns the stacks of every sample in p with their first value, for
// tests that check callers, not only totals.
func Stacks(p pprofile.Profiles) []NamedStack {
	var out []NamedStack
	forEachSample(p, func(dict pprofile.ProfilesDictionary, s pprofile.Sample, v int64) {
		st := NamedStack{Value: v}
		if li := s.LinkIndex(); li > 0 && int(li) < dict.LinkTable().Len() {
			l := dict.LinkTable().At(int(li))
			st.Link = ScopeLink{TraceID: l.TraceID(), SpanID: l.SpanID()}
		}
		if attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict); err == nil {
			if v, ok := attrs.Get(attrkey.ProbeID); ok {
				st.ProbeID = v.Str()
			}
			st.Attributes = attrs.AsRaw()
		}
		forEachLocation(dict, s, func(loc pprofile.Location) bool {
			typ := frameType(dict, loc)
			if loc.Lines().Len() == 0 {
				st.Functions = append(st.Functions, "")
				st.Frames = append(st.Frames, NamedFrame{Type: typ, Address: loc.Address(), Mapping: mappingFile(dict, loc)})
			}
			for _, l := range loc.Lines().All() {
				fn := symbolName(dict, l.FunctionIndex())
				st.Functions = append(st.Functions, fn)
				nf := NamedFrame{Function: fn, File: fileName(dict, l.FunctionIndex()), Type: typ, Line: l.Line()}
				if fn == "" {
					nf.Address, nf.Mapping = loc.Address(), mappingFile(dict, loc)
				}
				st.Frames = append(st.Frames, nf)
			}
			return true
		})
		out = append(out, st)
	})
	return out
}

// mappingFile is the file name of loc's mapping; "" without one.
func mappingFile(dict pprofile.ProfilesDictionary, loc pprofile.Location) string {
	i := int(loc.MappingIndex())
	if i <= 0 || i >= dict.MappingTable().Len() {
		return ""
	}
	s := int(dict.MappingTable().At(i).FilenameStrindex())
	if s < 0 || s >= dict.StringTable().Len() {
		return ""
	}
	return dict.StringTable().At(s)
}

// ProcessAttributes returns, by process.pid, the attributes that describe
// each process in p: those of its resource and those its samples carry,
// thread attributes left out.
func ProcessAttributes(p pprofile.Profiles) map[int64]map[string]any {
	out := map[int64]map[string]any{}
	dict := p.Dictionary()
	for _, rp := range p.ResourceProfiles().All() {
		res := rp.Resource().Attributes().AsRaw()
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				for _, s := range prof.Samples().All() {
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
					if err != nil {
						continue
					}
					pid, ok := attrs.Get(attrkey.ProcessPID)
					if !ok {
						continue
					}
					m := out[pid.Int()]
					if m == nil {
						m = maps.Clone(res)
						out[pid.Int()] = m
					}
					for k, v := range attrs.AsRaw() {
						if k != attrkey.ThreadID && k != attrkey.ThreadName {
							m[k] = v
						}
					}
				}
			}
		}
	}
	return out
}
