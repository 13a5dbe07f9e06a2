//go:build linux

package e2e

import (
	"encoding/hex"
	"fmt"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/profiles/v1development"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
)

// What a backend reads from our requests with the released protos: each
// Profile with its resource and scope, and its samples resolved through the
// request's dictionary. Any index out of its table is an error.

// releasedProfile is one Profile of a request.
type releasedProfile struct {
	ID         string              // hex profile_id
	Resource   []releasedAttribute // resource attributes, as encoded
	Scope      string              // scope name
	SampleType string              // sample_type's type, through the string table
	Samples    []releasedSample
	strings    []string // the request's string table
}

// releasedAttribute is one resource attribute as the released types decode
// it: a key either inline or as key_strindex, a value either inline or as
// string_value_strindex.
type releasedAttribute struct {
	Key              string
	KeyStrindex      int32
	Value            any // string, int64, bool, float64, []byte; nil for a string_value_strindex
	ValueStrindex    int32
	HasValueStrindex bool
}

// releasedSample is one sample with its attributes and functions (leaf
// first) resolved through the dictionary.
type releasedSample struct {
	Value      int64
	Attributes map[string]any
	Functions  []string
	// TraceID and SpanID (hex) are those of the sample's link; "" without.
	TraceID, SpanID string
}

// total is the sum of the profile's sample values.
func (p releasedProfile) total() int64 {
	var n int64
	for _, s := range p.Samples {
		n += s.Value
	}
	return n
}

// plainResource reads the resource attributes by their inline key and value
// only, as a backend that ignores key_strindex and string_value_strindex
// does (Pyroscope 2.0.6 builds its labels this way).
func (p releasedProfile) plainResource() map[string]any {
	out := map[string]any{}
	for _, a := range p.Resource {
		out[a.Key] = a.Value
	}
	return out
}

// resolvedResource reads the resource attributes resolving key_strindex and
// string_value_strindex through the string table, as the v1development spec
// asks of a profiles receiver.
func (p releasedProfile) resolvedResource() (map[string]any, error) {
	out := map[string]any{}
	for _, a := range p.Resource {
		k, v := a.Key, a.Value
		if k == "" {
			s, err := stringAt(p.strings, a.KeyStrindex)
			if err != nil {
				return nil, fmt.Errorf("resource key: %w", err)
			}
			k = s
		}
		if a.HasValueStrindex {
			s, err := stringAt(p.strings, a.ValueStrindex)
			if err != nil {
				return nil, fmt.Errorf("resource attribute %q: %w", k, err)
			}
			v = s
		}
		out[k] = v
	}
	return out, nil
}

// readReleased decodes every Profile of reqs.
func readReleased(reqs []*collectorpb.ExportProfilesServiceRequest) ([]releasedProfile, error) {
	var out []releasedProfile
	for ri, req := range reqs {
		dict := req.GetDictionary()
		for _, rp := range req.GetResourceProfiles() {
			res := releasedAttributes(rp.GetResource().GetAttributes())
			for _, sp := range rp.GetScopeProfiles() {
				for _, prof := range sp.GetProfiles() {
					p, err := readProfile(dict, prof)
					if err != nil {
						return nil, fmt.Errorf("request %d: profile %x: %w", ri, prof.GetProfileId(), err)
					}
					p.Resource, p.Scope = res, sp.GetScope().GetName()
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}

func releasedAttributes(kvs []*commonpb.KeyValue) []releasedAttribute {
	out := make([]releasedAttribute, 0, len(kvs))
	for _, kv := range kvs {
		a := releasedAttribute{Key: kv.GetKey(), KeyStrindex: kv.GetKeyStrindex()}
		if ref, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_StringValueStrindex); ok {
			a.ValueStrindex, a.HasValueStrindex = ref.StringValueStrindex, true
		} else {
			a.Value = inlineValue(kv.GetValue())
		}
		out = append(out, a)
	}
	return out
}

// inlineValue is a scalar AnyValue's value, nil for anything else.
func inlineValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	}
	return nil
}

func readProfile(dict *profilespb.ProfilesDictionary, prof *profilespb.Profile) (releasedProfile, error) {
	strs := dict.GetStringTable()
	p := releasedProfile{ID: hex.EncodeToString(prof.GetProfileId()), strings: strs}
	typ, err := stringAt(strs, prof.GetSampleType().GetTypeStrindex())
	if err != nil {
		return p, fmt.Errorf("sample type: %w", err)
	}
	p.SampleType = typ
	for i, s := range prof.GetSamples() {
		rs, err := readSample(dict, s)
		if err != nil {
			return p, fmt.Errorf("sample %d: %w", i, err)
		}
		p.Samples = append(p.Samples, rs)
	}
	return p, nil
}

func readSample(dict *profilespb.ProfilesDictionary, s *profilespb.Sample) (releasedSample, error) {
	strs := dict.GetStringTable()
	if len(s.GetValues()) != 1 {
		return releasedSample{}, fmt.Errorf("%d values, want 1", len(s.GetValues()))
	}
	rs := releasedSample{Value: s.GetValues()[0], Attributes: map[string]any{}}
	for _, ai := range s.GetAttributeIndices() {
		kv, err := at(dict.GetAttributeTable(), ai, "attribute")
		if err != nil {
			return rs, err
		}
		k, err := stringAt(strs, kv.GetKeyStrindex())
		if err != nil {
			return rs, fmt.Errorf("attribute key: %w", err)
		}
		v := inlineValue(kv.GetValue())
		if ref, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_StringValueStrindex); ok {
			if v, err = stringAt(strs, ref.StringValueStrindex); err != nil {
				return rs, fmt.Errorf("attribute %q: %w", k, err)
			}
		}
		rs.Attributes[k] = v
	}
	if li := s.GetLinkIndex(); li != 0 {
		l, err := at(dict.GetLinkTable(), li, "link")
		if err != nil {
			return rs, err
		}
		rs.TraceID, rs.SpanID = hex.EncodeToString(l.GetTraceId()), hex.EncodeToString(l.GetSpanId())
	}
	stack, err := at(dict.GetStackTable(), s.GetStackIndex(), "stack")
	if err != nil {
		return rs, err
	}
	for _, li := range stack.GetLocationIndices() {
		loc, err := at(dict.GetLocationTable(), li, "location")
		if err != nil {
			return rs, err
		}
		for _, line := range loc.GetLines() {
			fn, err := at(dict.GetFunctionTable(), line.GetFunctionIndex(), "function")
			if err != nil {
				return rs, err
			}
			name, err := stringAt(strs, fn.GetNameStrindex())
			if err != nil {
				return rs, fmt.Errorf("function name: %w", err)
			}
			rs.Functions = append(rs.Functions, name)
		}
	}
	return rs, nil
}

func at[T any](table []T, i int32, what string) (T, error) {
	if i < 0 || int(i) >= len(table) {
		var zero T
		return zero, fmt.Errorf("%s index %d out of a table of %d", what, i, len(table))
	}
	return table[i], nil
}

func stringAt(strs []string, i int32) (string, error) { return at(strs, i, "string") }
