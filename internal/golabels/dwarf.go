package golabels

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"strings"
)

// maxDWARFBytes bounds the DWARF DWARFOffsets reads (a Go 1.26 build of
// a large program has about 40 MiB of it).
const maxDWARFBytes = 256 << 20

// DWARFOffsets reads Offsets from the DWARF of f's runtime: for a release
// after those knownOffsets has, whose labels are still a slice.
func DWARFOffsets(f *elf.File) (Offsets, error) {
	var size uint64
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			size += s.Size
		}
	}
	if size > maxDWARFBytes { // read whole into memory: the file is the process's
		return Offsets{}, fmt.Errorf("%w: %d bytes of DWARF, more than %d", ErrNoDWARF, size, maxDWARFBytes)
	}
	d, err := f.DWARF()
	if err != nil {
		return Offsets{}, fmt.Errorf("%w: %v", ErrNoDWARF, err)
	}
	fields, err := structFields(d, map[string][]string{
		"runtime.g": {"m", "labels", "goid"},
		"runtime.m": {"g0", "gsignal", "curg"},
	})
	if err != nil {
		return Offsets{}, err
	}
	return Offsets{
		GM: fields["runtime.g.m"], GLabels: fields["runtime.g.labels"], GGoid: fields["runtime.g.goid"],
		MG0: fields["runtime.m.g0"], MGsignal: fields["runtime.m.gsignal"], MCurg: fields["runtime.m.curg"],
		Layout: LabelSlice,
	}, nil
}

// structFields returns the offsets of the named fields of the named
// structs ("struct.field"), an error naming any not found.
func structFields(d *dwarf.Data, want map[string][]string) (map[string]uint32, error) {
	out := map[string]uint32{}
	r := d.Reader()
	for len(want) > 0 {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("read DWARF: %w", err)
		}
		if e == nil {
			break
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		fields, ok := want[name]
		if e.Tag != dwarf.TagStructType || !ok {
			if e.Children && e.Tag != dwarf.TagCompileUnit { // types are a unit's children
				r.SkipChildren()
			}
			continue
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			return nil, fmt.Errorf("DWARF type %s: %w", name, err)
		}
		st, ok := t.(*dwarf.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Field {
			for _, w := range fields {
				if f.Name == w && f.ByteOffset >= 0 && f.ByteOffset < 1<<16 {
					out[name+"."+w] = uint32(f.ByteOffset)
				}
			}
		}
		delete(want, name)
		if e.Children {
			r.SkipChildren()
		}
	}
	for s, fields := range want {
		return nil, fmt.Errorf("%w: no DWARF struct %s (%v)", ErrNoDWARF, s, fields)
	}
	return out, nil
}
