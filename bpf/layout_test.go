package bpf

import (
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// goLayout is one generated Go type and the C struct of the program it
// stands for.
type goLayout struct {
	load  func() (*ebpf.CollectionSpec, error)
	cName string
	value any
}

// generatedTypes lists every generated type Go code reads or writes.
var generatedTypes = []goLayout{
	{LoadCpu, "stack_key", CpuStackKey{}},
	{LoadCpu, "sampler_config", CpuSamplerConfig{}},
	{LoadCpu, "sampler_stats", CpuSamplerStats{}},
	{LoadCpu, "thread_comm", CpuThreadComm{}},
	{LoadCpu, "inflight_seq", CpuInflightSeq{}},
	{LoadOffcpu, "stack_key", OffcpuStackKey{}},
	{LoadOffcpu, "sampler_config", OffcpuSamplerConfig{}},
	{LoadOffcpu, "sampler_stats", OffcpuSamplerStats{}},
	{LoadOffcpu, "thread_comm", OffcpuThreadComm{}},
	{LoadOffcpu, "inflight_seq", OffcpuInflightSeq{}},
	{LoadOffcpu, "offcpu_start", OffcpuOffcpuStart{}},
	{LoadOffcpu, "offcpu_pending", OffcpuOffcpuPending{}},
	{LoadOffcpuSwitchout, "stack_key", OffcpuSwitchoutStackKey{}},
	{LoadOffcpuSwitchout, "sampler_config", OffcpuSwitchoutSamplerConfig{}},
	{LoadOffcpuSwitchout, "sampler_stats", OffcpuSwitchoutSamplerStats{}},
	{LoadOffcpuSwitchout, "thread_comm", OffcpuSwitchoutThreadComm{}},
	{LoadOffcpuSwitchout, "inflight_seq", OffcpuSwitchoutInflightSeq{}},
	{LoadOffcpuSwitchout, "offcpu_sleep", OffcpuSwitchoutOffcpuSleep{}},
	{LoadProbe, "probe_config", ProbeProbeConfig{}},
	{LoadProbe, "probe_record", ProbeProbeRecord{}},
	{LoadProbe, "probe_stack_record", ProbeProbeStackRecord{}},
	{LoadProbe, "probe_stats", ProbeProbeStats{}},
	{LoadProbe, "probe_drops", ProbeProbeDrops{}},
	{LoadSelftest, "selftest_result", SelftestSelftestResult{}},
	{LoadCpu, "python_proc", CpuPythonProc{}},
	{LoadCpu, "open_scope", CpuOpenScope{}},
	{LoadCpu, "v8_proc", CpuV8Proc{}},
	{LoadRubywalk, "ruby_proc", RubywalkRubyProc{}},
	{LoadRubywalk, "rubywalk_record", RubywalkRubywalkRecord{}},
}

// TestGoTypesMatchObjects checks every generated Go type field by field
// (name, offset, size) against the struct's BTF in the committed object: a C
// struct changed without regenerating its Go side fails here.
func TestGoTypesMatchObjects(t *testing.T) {
	for _, g := range generatedTypes {
		goType := reflect.TypeOf(g.value)
		t.Run(goType.Name(), func(t *testing.T) {
			spec, err := g.load()
			if err != nil {
				t.Fatal(err)
			}
			var st *btf.Struct
			if err := spec.Types.TypeByName(g.cName, &st); err != nil {
				t.Fatalf("struct %s: %v", g.cName, err)
			}
			if got, want := goType.Size(), uintptr(st.Size); got != want {
				t.Errorf("%s is %d bytes, struct %s %d", goType.Name(), got, g.cName, want)
			}
			fields := exportedFields(goType)
			if len(fields) != len(st.Members) {
				t.Fatalf("%s has %d fields, struct %s %d members", goType.Name(), len(fields), g.cName, len(st.Members))
			}
			for i, m := range st.Members {
				f := fields[i]
				size, err := btf.Sizeof(m.Type)
				if err != nil {
					t.Fatal(err)
				}
				if f.Name != goName(m.Name) || f.Offset != uintptr(m.Offset.Bytes()) || f.Type.Size() != uintptr(size) {
					t.Errorf("%s.%s at %d (%d bytes), struct %s.%s at %d (%d bytes)",
						goType.Name(), f.Name, f.Offset, f.Type.Size(), g.cName, m.Name, m.Offset.Bytes(), size)
				}
			}
		})
	}
}

// TestSharedStructsAgree: the stack drain reads the maps of every
// stack-aggregating program with one set of types, so the structs of
// bpf/common.h must be laid out alike in each object.
func TestSharedStructsAgree(t *testing.T) {
	byName := map[string][]reflect.Type{}
	for _, g := range generatedTypes {
		byName[g.cName] = append(byName[g.cName], reflect.TypeOf(g.value))
	}
	for _, name := range []string{"stack_key", "sampler_config", "sampler_stats", "thread_comm", "inflight_seq"} {
		types := byName[name]
		if len(types) < 3 {
			t.Fatalf("%s: %d programs, want cpu, offcpu and offcpu_switchout", name, len(types))
		}
		for _, other := range types[1:] {
			if !sameLayout(types[0], other) {
				t.Errorf("%s: %s and %s differ", name, types[0].Name(), other.Name())
			}
		}
	}
}

func sameLayout(a, b reflect.Type) bool {
	fa, fb := exportedFields(a), exportedFields(b)
	if a.Size() != b.Size() || len(fa) != len(fb) {
		return false
	}
	for i := range fa {
		if fa[i].Name != fb[i].Name || fa[i].Offset != fb[i].Offset || fa[i].Type != fb[i].Type {
			return false
		}
	}
	return true
}

// exportedFields skips bpf2go's `_ structs.HostLayout` marker.
func exportedFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		if f := t.Field(i); f.Name != "_" {
			out = append(out, f)
		}
	}
	return out
}

// goName is bpf2go's name for a C member: snake_case to CamelCase.
func goName(c string) string {
	var b strings.Builder
	for _, part := range strings.Split(c, "_") {
		if part == "" {
			continue
		}
		r := []rune(part)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}
