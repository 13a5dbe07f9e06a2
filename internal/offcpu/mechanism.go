package offcpu

import (
	"errors"
	"fmt"
)

// Mechanism names how the user stack of a blocked thread is taken; the
// profile means the same whichever runs (see bpf/offcpu.h).
type Mechanism string

const (
	// MechanismAuto picks TaskWork where the kernel has it, else SwitchOut.
	MechanismAuto Mechanism = "auto"
	// MechanismTaskWork takes the user stack when the woken thread returns to
	// user space, in a BPF task work (Linux >= 6.18): only long waits cost a
	// stack walk.
	MechanismTaskWork Mechanism = "task_work"
	// MechanismSwitchOut takes it when the thread goes to sleep, on every
	// kernel: every switch-out of a traced thread costs a user stack walk.
	MechanismSwitchOut Mechanism = "switch_out"
)

// ParseMechanism checks a configured mechanism ("" is auto).
func ParseMechanism(s string) (Mechanism, error) {
	switch m := Mechanism(s); m {
	case "":
		return MechanismAuto, nil
	case MechanismAuto, MechanismTaskWork, MechanismSwitchOut:
		return m, nil
	default:
		return "", fmt.Errorf("want %s, %s or %s, got %q", MechanismAuto, MechanismTaskWork, MechanismSwitchOut, s)
	}
}

// taskWorkNeeds are the kernel features the task work mechanism needs,
// each with the first Linux version that has it.
var taskWorkNeeds = []kernelFeature{
	{kind: "kfunc", name: "bpf_task_work_schedule_resume_impl", since: "6.18"},
	{kind: "kfunc", name: "bpf_preempt_disable", since: "6.10"},
	{kind: "sched_switch argument", name: "prev_state", since: "5.18"},
	{kind: "map type", name: "task storage", since: "5.11"},
}

// kernelFeature is something a BPF program needs from the running kernel.
type kernelFeature struct {
	kind, name, since string
}

func (f kernelFeature) String() string {
	return fmt.Sprintf("%s %s (Linux %s)", f.kind, f.name, f.since)
}

// ErrMechanismUnsupported is the error of a Mechanism the kernel cannot run.
var ErrMechanismUnsupported = errors.New("mechanism not supported by this kernel")

// choose resolves want against the features the kernel lacks (of
// taskWorkNeeds): auto falls back to SwitchOut, an explicit TaskWork is
// refused, naming what is missing.
func choose(want Mechanism, missing []kernelFeature) (Mechanism, error) {
	switch want {
	case MechanismSwitchOut:
		return MechanismSwitchOut, nil
	case MechanismTaskWork:
		if len(missing) > 0 {
			return "", fmt.Errorf("%w: %s needs %s, which this kernel lacks: use %s or %s",
				ErrMechanismUnsupported, MechanismTaskWork, missing[0], MechanismAuto, MechanismSwitchOut)
		}
		return MechanismTaskWork, nil
	default:
		if len(missing) > 0 {
			return MechanismSwitchOut, nil
		}
		return MechanismTaskWork, nil
	}
}
