// Package pdata converts symbolized reports into OpenTelemetry profiles
// (pprofile.Profiles) following the "Emitted data" contract of the design.
package pdata

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// Scope is the instrumentation scope written on every ScopeProfiles.
type Scope struct{ Name, Version string }

// BuildProfiles converts reports into one pprofile.Profiles sharing a single
// dictionary. Every process (by PID) gets one ResourceProfiles with one
// ScopeProfiles that holds one Profile per report kind. Processes without
// samples are left out; no reports (or no samples) give an empty Profiles.
func BuildProfiles(scope Scope, profiles ...report.Profile) (pprofile.Profiles, error) {
	out := pprofile.NewProfiles()
	dict := newDictionaryBuilder(out.Dictionary())
	resources := map[uint32]pprofile.ScopeProfiles{}

	for ri := range profiles {
		rp := &profiles[ri]
		// One Profile per process within this report, even when a PID
		// is listed twice.
		byPID := map[uint32]pprofile.Profile{}
		for pi := range rp.Processes {
			proc := &rp.Processes[pi]
			if len(proc.Samples) == 0 {
				continue
			}
			pid := proc.Identity.PID
			sp, ok := resources[pid]
			if !ok {
				res := out.ResourceProfiles().AppendEmpty()
				sp = res.ScopeProfiles().AppendEmpty()
				sp.Scope().SetName(scope.Name)
				sp.Scope().SetVersion(scope.Version)
				resources[pid] = sp
				if err := putResourceAttributes(res.Resource().Attributes(), proc.Identity); err != nil {
					return pprofile.Profiles{}, fmt.Errorf("process %d: %w", pid, err)
				}
			}
			prof, ok := byPID[pid]
			if !ok {
				prof = sp.Profiles().AppendEmpty()
				if err := setProfileHeader(dict, prof, rp, pid, ri); err != nil {
					return pprofile.Profiles{}, fmt.Errorf("%s profile of process %d: %w", rp.Kind, pid, err)
				}
				byPID[pid] = prof
			}
			if err := appendSamples(dict, prof, proc.Samples); err != nil {
				return pprofile.Profiles{}, fmt.Errorf("%s profile of process %d: %w", rp.Kind, pid, err)
			}
		}
	}
	return out, nil
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
	if _, ok := attrs.Get(attrProcessPID); !ok {
		attrs.PutInt(attrProcessPID, int64(id.PID))
	}
	if _, ok := attrs.Get(attrExeName); !ok && id.ExeName != "" {
		attrs.PutStr(attrExeName, id.ExeName)
	}
	if _, ok := attrs.Get(attrExePath); !ok && id.ExePath != "" {
		attrs.PutStr(attrExePath, id.ExePath)
	}
	return nil
}

// setProfileHeader writes sample type, period, time range and id.
func setProfileHeader(dict *dictionaryBuilder, prof pprofile.Profile, rp *report.Profile, pid uint32, seq int) error {
	typ, unit := rp.Kind.SampleType()
	if err := setValueType(dict, prof.SampleType(), typ, unit); err != nil {
		return err
	}
	if rp.Kind == report.KindCPU {
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
	prof.SetProfileID(profileID(rp, pid, seq))
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
// process, time range and position of the report in the call.
func profileID(rp *report.Profile, pid uint32, seq int) pprofile.ProfileID {
	h := sha256.New()
	var buf [8]byte
	h.Write([]byte(rp.Kind))
	for _, v := range []uint64{uint64(pid), uint64(seq), uint64(rp.Start.UnixNano()), uint64(rp.End.UnixNano())} {
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

func appendSamples(dict *dictionaryBuilder, prof pprofile.Profile, samples []report.Sample) error {
	ss := prof.Samples()
	ss.EnsureCapacity(ss.Len() + len(samples))
	for i := range samples {
		s := &samples[i]
		si, err := dict.stack(s.Frames)
		if err != nil {
			return fmt.Errorf("sample %d: %w", i, err)
		}
		tid, err := dict.attribute(attrThreadID, int64(s.TID))
		if err != nil {
			return err
		}
		ps := ss.AppendEmpty()
		ps.SetStackIndex(si)
		ps.Values().Append(s.Value)
		ps.AttributeIndices().Append(tid)
		if s.ThreadName != "" {
			tn, err := dict.attribute(attrThreadName, s.ThreadName)
			if err != nil {
				return err
			}
			ps.AttributeIndices().Append(tn)
		}
	}
	return nil
}
