//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

var processedInsns = regexp.MustCompile(`processed (\d+) insns`)

// TestProgramsLoad loads the collections of the CPU sampler and the off-CPU
// tracer (the task_work one where the kernel has its kfunc, Linux 6.18) as
// they are committed, reading open probe scopes (the largest programs),
// with bpf_task_pt_regs where the kernel has it, and the probes' (before
// Linux 5.15, without attach cookies, as internal/probes loads them: the
// cookie a constant): the verifier of the running kernel accepts every
// program. Its figure (kernel matrix) is the most instructions the verifier
// processed for one program, of its limit of 1M.
func TestProgramsLoad(t *testing.T) {
	testutil.RequireBPF(t)
	_ = memlock.Raise() // BPF memory counts against RLIMIT_MEMLOCK before 5.11
	loads := map[string]func() (*ebpf.CollectionSpec, error){"cpu": LoadCpu, "switch_out": LoadOffcpuSwitchout, "probe": loadProbeAsUsed, "alloc": loadAllocAsUsed}
	if kernelHasFunc(t, "bpf_task_work_schedule_resume_impl") {
		loads["task_work"] = LoadOffcpu
	}
	var figures []string
	for name, load := range loads {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		if v := spec.Variables["link_scopes"]; v != nil {
			if err := v.Set(uint32(1)); err != nil {
				t.Fatal(err)
			}
		}
		// As internal/unwinder sets it: the code the kernel's helper
		// enables is verified too.
		if v := spec.Variables["have_task_pt_regs"]; v != nil && features.HaveProgramHelper(ebpf.PerfEvent, asm.FnTaskPtRegs) == nil {
			if err := v.Set(uint8(1)); err != nil {
				t.Fatal(err)
			}
		}
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		if err != nil {
			var verr *ebpf.VerifierError
			if errors.As(err, &verr) {
				err = fmt.Errorf("%w (log ends: %s)", err, strings.Join(verr.Log[max(len(verr.Log)-30, 0):], " | "))
			}
			t.Errorf("%s: %v", name, err)
			// A program past the verifier's 1M instructions: its last ones
			// say little, and logging them all takes the emulated guests
			// longer than the check's timeout.
			if verr != nil && !strings.Contains(err.Error(), "too large") {
				logRefusal(t, spec, err)
			}
			continue
		}
		most, which := 0, ""
		for prog, p := range coll.Programs {
			if m := processedInsns.FindStringSubmatch(p.VerifierLog); m != nil {
				n, _ := strconv.Atoi(m[1])
				t.Logf("%s: %s %d instructions", name, prog, n)
				if n > most {
					most, which = n, prog
				}
			}
		}
		coll.Close()
		k := fmt.Sprintf("%dk", most/1000)
		if most < 10000 {
			k = fmt.Sprintf("%.1fk", float64(most)/1000)
		}
		figures = append(figures, fmt.Sprintf("%s %s (%s)", name, k, which))
	}
	sort.Strings(figures)
	t.Logf("matrix: %s", strings.Join(figures, ", "))
}

// loadProbeAsUsed is LoadProbe with, on a kernel without attach cookies,
// every bpf_get_attach_cookie call replaced by a constant, as
// internal/probes replaces it by the probe index: in probe_entry with a
// USDT argument fetch too (the copy internal/probes loads for a site
// with one), so that the verifier checks the fetch.
func loadProbeAsUsed() (*ebpf.CollectionSpec, error) {
	spec, err := LoadProbe()
	if err != nil || features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) == nil {
		return spec, err
	}
	for _, p := range spec.Programs {
		for i, ins := range p.Instructions {
			if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnGetAttachCookie) {
				cookie := int32(0)
				if p.Name == "probe_entry" {
					cookie = 1 << 16 // probe 0, usdt_specs entry 0
				}
				p.Instructions[i] = asm.Mov.Imm(asm.R0, cookie).WithMetadata(ins.Metadata)
			}
		}
	}
	return spec, nil
}

// loadAllocAsUsed is LoadAlloc without its USDT programs on a kernel
// without attach cookies, as internal/allocs loads it.
func loadAllocAsUsed() (*ebpf.CollectionSpec, error) {
	spec, err := LoadAlloc()
	if err != nil || features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) == nil {
		return spec, err
	}
	delete(spec.Programs, "usdt_alloc")
	delete(spec.Programs, "usdt_free")
	return spec, nil
}

// kernelHasFunc says whether the running kernel's BTF has function name.
func kernelHasFunc(t *testing.T, name string) bool {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	var fn *btf.Func
	return spec.TypeByName(name, &fn) == nil
}

var refusedProgram = regexp.MustCompile(`program (\w+):`)

// logRefusal logs the instructions the verifier checked last before it
// refused the program err names, from a load of that program alone (its
// tail calls left out) that logs every instruction.
func logRefusal(t *testing.T, spec *ebpf.CollectionSpec, err error) {
	m := refusedProgram.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	one := spec.Copy()
	for name := range one.Programs {
		if name != m[1] {
			delete(one.Programs, name)
		}
	}
	for _, ms := range one.Maps {
		if ms.Type == ebpf.ProgramArray {
			ms.Contents = nil
		}
	}
	_, err = ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{
		LogLevel: ebpf.LogLevelInstruction, LogSizeStart: 32 << 20}})
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		t.Logf("%s: the verifier's last instructions:\n%s", m[1], strings.Join(verr.Log[max(len(verr.Log)-80, 0):], "\n"))
	}
}
