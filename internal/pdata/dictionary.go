package pdata

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// maxTableLength bounds every dictionary table: indices are int32.
const maxTableLength = math.MaxInt32

// dictionaryBuilder fills one ProfilesDictionary, deduplicating every table
// by content. Index 0 of every table is the zero value, as the OTLP profiles
// data model requires.
type dictionaryBuilder struct {
	dict pprofile.ProfilesDictionary

	strings   map[string]int32
	functions map[functionKey]int32
	mappings  map[report.Mapping]int32
	locations map[string]int32 // key: encoded location content
	// fileLocations are the locations of addresses in mapped files, by
	// the symbolizer's shared Mapping value: the same address names the
	// same frames throughout a report, and most repeat in many samples.
	fileLocations map[fileLocationKey]int32
	stacks        map[string]int32 // key: encoded location indices
	attributes    map[attributeKey]int32
	links         map[report.ScopeLink]int32

	scratch []byte
}

// fileLocationKey is an address of a mapped file and the number of frames
// it expands to.
type fileLocationKey struct {
	mapping *report.Mapping
	address uint64
	frames  int
}

// functionKey identifies a function; named says it has a symbol name (a
// made-up address name has no system name, see addressName).
type functionKey struct {
	name, file int32
	named      bool
}

// attributeKey identifies a dictionary attribute by its typed value; two
// attributes with the same key but different value types stay distinct.
type attributeKey struct {
	key  int32
	kind pcommon.ValueType
	str  string
	num  int64
}

func newDictionaryBuilder(dict pprofile.ProfilesDictionary) *dictionaryBuilder {
	b := &dictionaryBuilder{
		dict:          dict,
		strings:       map[string]int32{"": 0},
		functions:     map[functionKey]int32{{}: 0},
		mappings:      map[report.Mapping]int32{{}: 0},
		locations:     map[string]int32{},
		fileLocations: map[fileLocationKey]int32{},
		stacks:        map[string]int32{"": 0},
		attributes:    map[attributeKey]int32{},
		links:         map[report.ScopeLink]int32{},
	}
	dict.StringTable().Append("")
	dict.FunctionTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	return b
}

func checkLength(table string, n int) error {
	if n >= maxTableLength {
		return fmt.Errorf("dictionary %s table exceeds %d entries", table, maxTableLength)
	}
	return nil
}

func (b *dictionaryBuilder) str(s string) (int32, error) {
	if i, ok := b.strings[s]; ok {
		return i, nil
	}
	t := b.dict.StringTable()
	if err := checkLength("string", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	t.Append(s)
	b.strings[s] = i
	return i, nil
}

// function returns the index of the function name (defined in file), with
// name as its system name when named, adding it when new.
func (b *dictionaryBuilder) function(name, file string, named bool) (int32, error) {
	n, err := b.str(name)
	if err != nil {
		return 0, err
	}
	f, err := b.str(file)
	if err != nil {
		return 0, err
	}
	k := functionKey{n, f, named}
	if i, ok := b.functions[k]; ok {
		return i, nil
	}
	t := b.dict.FunctionTable()
	if err := checkLength("function", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	fn := t.AppendEmpty()
	fn.SetNameStrindex(n)
	if named {
		fn.SetSystemNameStrindex(n)
	}
	fn.SetFilenameStrindex(f)
	b.functions[k] = i
	return i, nil
}

// attribute returns the index of the attribute key=value, adding it when new.
func (b *dictionaryBuilder) attribute(key string, value any) (int32, error) {
	k, err := b.str(key)
	if err != nil {
		return 0, err
	}
	v := pcommon.NewValueEmpty()
	if err := setValue(v, value); err != nil {
		return 0, fmt.Errorf("attribute %q: %w", key, err)
	}
	ak := attributeKey{key: k, kind: v.Type()}
	switch v.Type() {
	case pcommon.ValueTypeStr:
		ak.str = v.Str()
	case pcommon.ValueTypeInt:
		ak.num = v.Int()
	case pcommon.ValueTypeBool:
		if v.Bool() {
			ak.num = 1
		}
	case pcommon.ValueTypeDouble:
		ak.num = int64(math.Float64bits(v.Double()))
	default:
		ak.str = v.AsString()
	}
	if i, ok := b.attributes[ak]; ok {
		return i, nil
	}
	t := b.dict.AttributeTable()
	if err := checkLength("attribute", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	kv := t.AppendEmpty()
	kv.SetKeyStrindex(k)
	v.MoveTo(kv.Value())
	b.attributes[ak] = i
	return i, nil
}

// attributeList returns the indices of attrs, sorted by key.
// link returns the index of the link to l's trace and span, adding it when
// new.
func (b *dictionaryBuilder) link(l *report.ScopeLink) (int32, error) {
	k := report.ScopeLink{TraceID: l.TraceID, SpanID: l.SpanID}
	if i, ok := b.links[k]; ok {
		return i, nil
	}
	t := b.dict.LinkTable()
	if err := checkLength("link", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	nl := t.AppendEmpty()
	nl.SetTraceID(pcommon.TraceID(l.TraceID))
	nl.SetSpanID(pcommon.SpanID(l.SpanID))
	b.links[k] = i
	return i, nil
}

func (b *dictionaryBuilder) attributeList(attrs map[string]any) ([]int32, error) {
	out := make([]int32, 0, len(attrs))
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		i, err := b.attribute(k, attrs[k])
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

func (b *dictionaryBuilder) mapping(m *report.Mapping) (int32, error) {
	if m == nil {
		return 0, nil
	}
	if i, ok := b.mappings[*m]; ok {
		return i, nil
	}
	file, err := b.str(m.File)
	if err != nil {
		return 0, err
	}
	var attrs []int32
	for _, a := range [...]struct{ key, value string }{
		{attrkey.BuildIDGNU, m.BuildIDGNU},
		{attrkey.BuildIDGo, m.BuildIDGo},
	} {
		if a.value == "" {
			continue
		}
		ai, err := b.attribute(a.key, a.value)
		if err != nil {
			return 0, err
		}
		attrs = append(attrs, ai)
	}
	t := b.dict.MappingTable()
	if err := checkLength("mapping", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	pm := t.AppendEmpty()
	pm.SetMemoryStart(m.Start)
	pm.SetMemoryLimit(m.Limit)
	pm.SetFileOffset(m.Offset)
	pm.SetFilenameStrindex(file)
	pm.AttributeIndices().Append(attrs...)
	b.mappings[*m] = i
	return i, nil
}

// location returns the index of the location of one address: frames holds
// the inlined callees (Inlined=true) followed by the frame they were inlined
// into, innermost first, all at the same address.
func (b *dictionaryBuilder) location(frames []report.Frame) (int32, error) {
	outer := frames[len(frames)-1]
	var fk fileLocationKey
	if m := outer.Mapping; m != nil && strings.HasPrefix(m.File, "/") && (outer.Type == report.FrameNative || outer.Type == report.FrameGo) {
		fk = fileLocationKey{m, outer.Address, len(frames)}
		if i, ok := b.fileLocations[fk]; ok {
			return i, nil
		}
	}
	i, err := b.newLocation(frames, outer)
	if err == nil && fk.mapping != nil {
		b.fileLocations[fk] = i
	}
	return i, err
}

// newLocation is location without the file locations' shortcut.
func (b *dictionaryBuilder) newLocation(frames []report.Frame, outer report.Frame) (int32, error) {
	mi, err := b.mapping(outer.Mapping)
	if err != nil {
		return 0, err
	}
	var typeAttr int32
	if outer.Type != "" {
		if typeAttr, err = b.attribute(attrkey.ProfileFrameType, outer.Type); err != nil {
			return 0, err
		}
	}
	type line struct {
		fn   int32
		line int64
	}
	lines := make([]line, 0, len(frames))
	for _, f := range frames {
		name, named := f.Function, f.Function != ""
		if !named {
			name = addressName(f) // unsymbolized: named for display only
		}
		fi, err := b.function(name, f.File, named)
		if err != nil {
			return 0, err
		}
		lines = append(lines, line{fi, f.Line})
	}

	key := b.scratch[:0]
	key = binary.AppendUvarint(key, outer.Address)
	key = binary.AppendUvarint(key, uint64(mi))
	key = binary.AppendUvarint(key, uint64(typeAttr))
	for _, l := range lines {
		key = binary.AppendUvarint(key, uint64(l.fn))
		key = binary.AppendVarint(key, l.line)
	}
	b.scratch = key
	if i, ok := b.locations[string(key)]; ok {
		return i, nil
	}
	t := b.dict.LocationTable()
	if err := checkLength("location", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	loc := t.AppendEmpty()
	loc.SetAddress(outer.Address)
	loc.SetMappingIndex(mi)
	if typeAttr != 0 {
		loc.AttributeIndices().Append(typeAttr)
	}
	pl := loc.Lines()
	pl.EnsureCapacity(len(lines))
	for _, l := range lines {
		nl := pl.AppendEmpty()
		nl.SetFunctionIndex(l.fn)
		nl.SetLine(l.line)
	}
	b.locations[string(key)] = i
	return i, nil
}

// stack returns the index of the stack of frames (leaf first), folding
// inlined frames into the location of the frame they were inlined into.
func (b *dictionaryBuilder) stack(frames []report.Frame) (int32, error) {
	var locs []int32
	start := 0
	for i, f := range frames {
		// A trailing inlined frame without its caller still gets a location.
		if f.Inlined && i != len(frames)-1 {
			continue
		}
		li, err := b.location(frames[start : i+1])
		if err != nil {
			return 0, err
		}
		locs = append(locs, li)
		start = i + 1
	}

	key := b.scratch[:0]
	for _, l := range locs {
		key = binary.AppendUvarint(key, uint64(l))
	}
	b.scratch = key
	if i, ok := b.stacks[string(key)]; ok {
		return i, nil
	}
	t := b.dict.StackTable()
	if err := checkLength("stack", t.Len()); err != nil {
		return 0, err
	}
	i := int32(t.Len())
	t.AppendEmpty().LocationIndices().Append(locs...)
	b.stacks[string(key)] = i
	return i, nil
}

// setValue stores a Go value of an attribute into v with its OTel type.
func setValue(v pcommon.Value, value any) error {
	switch x := value.(type) {
	case string:
		v.SetStr(x)
	case bool:
		v.SetBool(x)
	case int:
		v.SetInt(int64(x))
	case int8:
		v.SetInt(int64(x))
	case int16:
		v.SetInt(int64(x))
	case int32:
		v.SetInt(int64(x))
	case int64:
		v.SetInt(x)
	case uint8:
		v.SetInt(int64(x))
	case uint16:
		v.SetInt(int64(x))
	case uint32:
		v.SetInt(int64(x))
	case uint:
		if uint64(x) > math.MaxInt64 {
			return fmt.Errorf("value %d overflows int64", x)
		}
		v.SetInt(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return fmt.Errorf("value %d overflows int64", x)
		}
		v.SetInt(int64(x))
	case float32:
		v.SetDouble(float64(x))
	case float64:
		v.SetDouble(x)
	case []string:
		s := v.SetEmptySlice()
		s.EnsureCapacity(len(x))
		for _, e := range x {
			s.AppendEmpty().SetStr(e)
		}
	default:
		return fmt.Errorf("unsupported value type %T", value)
	}
	return nil
}
