// Package pdata converts symbolized reports into OpenTelemetry profiles
// (pprofile.Profiles) following the "Emitted data" contract of the design.
package pdata

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Scope is the instrumentation scope written on every ScopeProfiles.
type Scope struct{ Name, Version string }

// BuildProfiles converts reports into one pprofile.Profiles sharing a single
// dictionary, in as few ResourceProfiles as the processes' identities allow:
// one per container (its container and Kubernetes attributes, and its
// service.name, on the resource) and one for every other process of the
// host. Each holds one ScopeProfiles with one Profile per report kind; the
// process (process.*, service.name) and thread attributes go on the
// samples. A backend stores a request as one write per
// Profile (Grafana Pyroscope, one after another), so fewer Profiles make a
// report one quick write instead of one per process; see the README's
// "Backends". Processes without samples are left out; no reports (or no
// samples) give an empty Profiles.
func BuildProfiles(scope Scope, profiles ...report.Profile) (pprofile.Profiles, error) {
	return Builder{Scope: scope, Threads: AllThreadAttributes}.Build(profiles...)
}

// ThreadAttributes says which attributes of its thread a sample carries.
type ThreadAttributes struct {
	ID   bool // thread.id
	Name bool // thread.name (when the kernel or /proc named the thread)
}

// AllThreadAttributes is every thread attribute.
var AllThreadAttributes = ThreadAttributes{ID: true, Name: true}

// Builder builds profiles (see BuildProfiles) with its settings.
type Builder struct {
	Scope   Scope
	Threads ThreadAttributes
	// ResourceOnSamples are resource attributes (host.name, container.id,
	// k8s.*) each sample carries too, for a backend that reads the samples'
	// attributes but not the resource's (Grafana Pyroscope 2.2.1): one
	// attribute table entry per value, an index per sample.
	ResourceOnSamples []string
}

// Build converts reports as BuildProfiles does, with b's thread attributes.
func (b Builder) Build(profiles ...report.Profile) (pprofile.Profiles, error) {
	scope := b.Scope
	out := pprofile.NewProfiles()
	dict := newDictionaryBuilder(out.Dictionary())
	resources := map[string]*resourceEntry{}

	for ri := range profiles {
		rp := &profiles[ri]
		for pi := range rp.Processes {
			proc := &rp.Processes[pi]
			if len(proc.Samples) == 0 {
				continue
			}
			key, resAttrs, sampleAttrs := splitIdentity(proc.Identity)
			for _, k := range b.ResourceOnSamples {
				if v, ok := resAttrs[k]; ok {
					sampleAttrs[k] = v
				}
			}
			res, ok := resources[key]
			if !ok {
				rps := out.ResourceProfiles().AppendEmpty()
				if err := putAttributes(rps.Resource().Attributes(), resAttrs); err != nil {
					return pprofile.Profiles{}, fmt.Errorf("resource %s: %w", key, err)
				}
				sp := rps.ScopeProfiles().AppendEmpty()
				sp.Scope().SetName(scope.Name)
				sp.Scope().SetVersion(scope.Version)
				res = &resourceEntry{scope: sp, profiles: map[int]pprofile.Profile{}}
				resources[key] = res
			}
			prof, ok := res.profiles[ri]
			if !ok {
				prof = res.scope.Profiles().AppendEmpty()
				if err := setProfileHeader(dict, prof, rp, key, ri); err != nil {
					return pprofile.Profiles{}, fmt.Errorf("%s profile of %s: %w", rp.Kind, key, err)
				}
				res.profiles[ri] = prof
			}
			procAttrs, err := dict.attributeList(sampleAttrs)
			if err != nil {
				return pprofile.Profiles{}, fmt.Errorf("process %d: %w", proc.Identity.PID, err)
			}
			if rp.ProbeID != "" {
				probe, err := dict.attribute(attrkey.ProbeID, rp.ProbeID)
				if err != nil {
					return pprofile.Profiles{}, err
				}
				procAttrs = append(procAttrs, probe)
			}
			if err := appendSamples(dict, prof, procAttrs, b.Threads, proc.Samples); err != nil {
				return pprofile.Profiles{}, fmt.Errorf("%s profile of process %d: %w", rp.Kind, proc.Identity.PID, err)
			}
		}
	}
	return out, nil
}

// resourceEntry is one ResourceProfiles being built: its scope and its
// Profile of each report (by index in the call).
type resourceEntry struct {
	scope    pprofile.ScopeProfiles
	profiles map[int]pprofile.Profile
}

// splitIdentity splits a process's attributes between its resource (host,
// container and Kubernetes attributes, and a container's service.name) and
// its samples (process attributes and service.name), and names the
// resource: the container, or the host.
func splitIdentity(id report.Identity) (key string, resource, sample map[string]any) {
	resource, sample = map[string]any{}, map[string]any{}
	container, _ := id.Attributes[attrkey.ContainerID].(string)
	for k, v := range id.Attributes {
		switch {
		case strings.HasPrefix(k, "host.") || strings.HasPrefix(k, "container.") || strings.HasPrefix(k, "k8s."):
			resource[k] = v
		case k == attrkey.ServiceName && container != "":
			// On the samples too: collectors from v0.163 send resource
			// attributes as string-table references, which a backend may
			// not resolve (Grafana Pyroscope 2.2.1 drops them and files
			// the samples under unknown_service); it resolves the
			// samples' attributes, and takes their service.name.
			resource[k] = v
			sample[k] = v
		default:
			sample[k] = v
		}
	}
	if _, ok := sample[attrkey.ProcessPID]; !ok {
		sample[attrkey.ProcessPID] = int64(id.PID)
	}
	if _, ok := sample[attrkey.ProcessExecutableName]; !ok && id.ExeName != "" {
		sample[attrkey.ProcessExecutableName] = id.ExeName
	}
	if _, ok := sample[attrkey.ProcessExecutablePath]; !ok && id.ExePath != "" {
		sample[attrkey.ProcessExecutablePath] = id.ExePath
	}
	if container != "" {
		return "container:" + container, resource, sample
	}
	return "host", resource, sample
}

// putAttributes copies attrs, typed and sorted by key.
func putAttributes(dst pcommon.Map, attrs map[string]any) error {
	dst.EnsureCapacity(len(attrs))
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if err := setValue(dst.PutEmpty(k), attrs[k]); err != nil {
			return fmt.Errorf("attribute %q: %w", k, err)
		}
	}
	return nil
}

// setProfileHeader writes sample type, period, time range and id.
func setProfileHeader(dict *dictionaryBuilder, prof pprofile.Profile, rp *report.Profile, resource string, seq int) error {
	typ, unit := rp.Kind.SampleType()
	if err := setValueType(dict, prof.SampleType(), typ, unit); err != nil {
		return err
	}
	if rp.Kind == report.KindCPU || rp.Kind.Memory() {
		typ, unit := rp.Kind.PeriodType()
		if err := setValueType(dict, prof.PeriodType(), typ, unit); err != nil {
			return err
		}
		prof.SetPeriod(rp.Period)
	}
	if !rp.Start.IsZero() {
		prof.SetTime(pcommon.NewTimestampFromTime(rp.Start))
		if d := rp.End.Sub(rp.Start); d > 0 {
			prof.SetDurationNano(uint64(d))
		}
	}
	prof.SetProfileID(profileID(rp, resource, seq))
	return nil
}

func setValueType(dict *dictionaryBuilder, vt pprofile.ValueType, typ, unit string) error {
	ti, err := dict.str(typ)
	if err != nil {
		return err
	}
	ui, err := dict.str(unit)
	if err != nil {
		return err
	}
	vt.SetTypeStrindex(ti)
	vt.SetUnitStrindex(ui)
	return nil
}

// profileID derives a non-zero id from what identifies a profile: kind,
// resource, time range and position of the report in the call.
func profileID(rp *report.Profile, resource string, seq int) pprofile.ProfileID {
	h := sha256.New()
	var buf [8]byte
	h.Write([]byte(rp.Kind))
	h.Write([]byte(resource))
	for _, v := range []uint64{uint64(seq), uint64(rp.Start.UnixNano()), uint64(rp.End.UnixNano())} {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	var id pprofile.ProfileID
	copy(id[:], h.Sum(nil))
	if id.IsEmpty() {
		id[0] = 1
	}
	return id
}

// appendSamples appends samples with the attributes procAttrs (dictionary
// indices) of their process and those of threads of their thread.
func appendSamples(dict *dictionaryBuilder, prof pprofile.Profile, procAttrs []int32, threads ThreadAttributes, samples []report.Sample) error {
	ss := prof.Samples()
	ss.EnsureCapacity(ss.Len() + len(samples))
	for i := range samples {
		s := &samples[i]
		si, err := dict.stack(s.Frames)
		if err != nil {
			return fmt.Errorf("sample %d: %w", i, err)
		}
		ps := ss.AppendEmpty()
		ps.SetStackIndex(si)
		ps.Values().Append(s.Value)
		ps.AttributeIndices().Append(procAttrs...)
		if threads.ID {
			tid, err := dict.attribute(attrkey.ThreadID, int64(s.TID))
			if err != nil {
				return err
			}
			ps.AttributeIndices().Append(tid)
		}
		if threads.Name && s.ThreadName != "" {
			tn, err := dict.attribute(attrkey.ThreadName, s.ThreadName)
			if err != nil {
				return err
			}
			ps.AttributeIndices().Append(tn)
		}
		if err := setLinks(dict, ps, s); err != nil {
			return err
		}
		if err := setAttributes(dict, ps, s.Attributes); err != nil {
			return err
		}
	}
	return nil
}

// setAttributes gives ps the sample's own attributes (its thread context
// record's, or its goroutine's labels), sorted by key.
func setAttributes(dict *dictionaryBuilder, ps pprofile.Sample, attrs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		ai, err := dict.attribute(k, attrs[k])
		if err != nil {
			return err
		}
		ps.AttributeIndices().Append(ai)
	}
	return nil
}

// setLinks links ps to the span of its thread context and to the log
// record of its probe scope. A sample has one
// link: the thread context's, the SDK's own view (OTEP 4947), wins; the
// scope is then named by attributes (probe.id, probe.scope.span_id).
func setLinks(dict *dictionaryBuilder, ps pprofile.Sample, s *report.Sample) error {
	if s.Trace == nil {
		if s.Link != nil {
			return setLink(dict, ps, s.Link)
		}
		return nil
	}
	li, err := dict.link(&report.ScopeLink{TraceID: s.Trace.TraceID, SpanID: s.Trace.SpanID})
	if err != nil {
		return err
	}
	ps.SetLinkIndex(li)
	if s.Link != nil {
		for k, v := range map[string]string{attrkey.ProbeID: s.Link.ProbeID, attrkey.ProbeScopeSpanID: hex.EncodeToString(s.Link.SpanID[:])} {
			ai, err := dict.attribute(k, v)
			if err != nil {
				return err
			}
			ps.AttributeIndices().Append(ai)
		}
	}
	return nil
}

// setLink links ps to the log record of its probe scope and gives it the
// scope's probe.id.
func setLink(dict *dictionaryBuilder, ps pprofile.Sample, l *report.ScopeLink) error {
	li, err := dict.link(l)
	if err != nil {
		return err
	}
	ps.SetLinkIndex(li)
	probe, err := dict.attribute(attrkey.ProbeID, l.ProbeID)
	if err != nil {
		return err
	}
	ps.AttributeIndices().Append(probe)
	return nil
}
