package probes

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Names of the uprobe programs in bpf/probe.bpf.c: a thread's scope, and a
// goroutine's (Go binaries).
const (
	entryProgram   = "probe_entry"
	exitProgram    = "probe_exit"
	goEntryProgram = "probe_go_entry"
	goExitProgram  = "probe_go_exit"
)

// uprobePrograms are the programs of probePrograms, in its order.
var uprobePrograms = [...]string{entryProgram, exitProgram, goEntryProgram, goExitProgram}

// probePrograms are the uprobe programs of one probe, in uprobePrograms'
// order.
type probePrograms [len(uprobePrograms)]*ebpf.Program

func (p probePrograms) entry(goroutine bool) *ebpf.Program {
	if goroutine {
		return p[2]
	}
	return p[0]
}

func (p probePrograms) exit(goroutine bool) *ebpf.Program {
	if goroutine {
		return p[3]
	}
	return p[1]
}

// withProbeIndex returns a copy of prog in which every call of
// bpf_get_attach_cookie yields index instead: on kernels without attach
// cookies (before 5.15) each probe gets its own copy of the programs.
func withProbeIndex(prog *ebpf.ProgramSpec, index int) (*ebpf.ProgramSpec, error) {
	p := prog.Copy()
	p.Name = fmt.Sprintf("%s_%d", prog.Name, index)
	patched := 0
	for i, ins := range p.Instructions {
		if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnGetAttachCookie) {
			p.Instructions[i] = asm.Mov.Imm(asm.R0, int32(index)).WithMetadata(ins.Metadata)
			patched++
		}
	}
	if patched == 0 {
		return nil, fmt.Errorf("program %s calls no bpf_get_attach_cookie", prog.Name)
	}
	return p, nil
}

// perProbeName is the collection name of probe index's copy of program.
func perProbeName(program string, index int) string {
	return fmt.Sprintf("%s_%d", program, index)
}

// splitPerProbe replaces the entry and exit programs of spec by one patched
// copy per probe index (see withProbeIndex).
func splitPerProbe(spec *ebpf.CollectionSpec, probes int) error {
	for _, name := range uprobePrograms {
		prog, ok := spec.Programs[name]
		if !ok {
			return errors.New("probe BPF spec has no program " + name)
		}
		for i := range probes {
			p, err := withProbeIndex(prog, i)
			if err != nil {
				return err
			}
			spec.Programs[perProbeName(name, i)] = p
		}
		delete(spec.Programs, name)
	}
	return nil
}
