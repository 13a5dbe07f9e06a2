package probes

import (
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// On kernels without attach cookies every probe gets copies of the entry and
// exit programs that load its index as a constant.
func TestSplitPerProbe(t *testing.T) {
	spec, err := bpf.LoadProbe()
	if err != nil {
		t.Fatal(err)
	}
	if err := splitPerProbe(spec, 3); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{entryProgram, exitProgram} {
		if _, ok := spec.Programs[name]; ok {
			t.Errorf("%s still in the spec", name)
		}
		for i := range 3 {
			p, ok := spec.Programs[perProbeName(name, i)]
			if !ok {
				t.Fatalf("no copy %d of %s", i, name)
			}
			var consts []int64
			for _, ins := range p.Instructions {
				if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnGetAttachCookie) {
					t.Errorf("%s still calls bpf_get_attach_cookie", p.Name)
				}
				if ins.OpCode == asm.Mov.Op(asm.ImmSource) && ins.Dst == asm.R0 {
					consts = append(consts, ins.Constant)
				}
			}
			if len(consts) == 0 || consts[0] != int64(i) {
				t.Errorf("%s: first constants loaded into r0 are %v, want the probe index %d first", p.Name, consts, i)
			}
			if p.Type != spec.Programs[perProbeName(name, 0)].Type {
				t.Errorf("%s changed program type", p.Name)
			}
		}
	}
	if _, err := withProbeIndex(spec.Programs["probe_exec"], 0); err == nil {
		t.Error("patching a program without cookie calls did not fail")
	}
}
