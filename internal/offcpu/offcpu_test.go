package offcpu

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "zero", opts: Options{}},
		{name: "1ms", opts: Options{MinBlock: time.Millisecond, TargetPIDs: []uint32{1}, ExcludePIDs: []uint32{2}}},
		{name: "negative min_block", opts: Options{MinBlock: -1}, wantErr: "MinBlock"},
		{name: "too many targets", opts: Options{TargetPIDs: make([]uint32, MaxTargets+1)}, wantErr: "capacity"},
		{name: "too many excluded", opts: Options{ExcludePIDs: make([]uint32, MaxExcluded+1)}, wantErr: "excluded"},
	}
	for _, tt := range tests {
		err := tt.opts.validate()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestChooseMechanism(t *testing.T) {
	lacksTaskWork := taskWorkNeeds[:1]
	tests := []struct {
		want    Mechanism
		missing []kernelFeature
		got     Mechanism
		err     string
	}{
		{MechanismAuto, nil, MechanismTaskWork, ""},
		{MechanismAuto, lacksTaskWork, MechanismSwitchOut, ""},
		{MechanismSwitchOut, nil, MechanismSwitchOut, ""},
		{MechanismTaskWork, nil, MechanismTaskWork, ""},
		{MechanismTaskWork, lacksTaskWork, "", "mechanism not supported by this kernel: task_work needs kfunc bpf_task_work_schedule_resume_impl (Linux 6.18)"},
	}
	for _, tt := range tests {
		got, err := choose(tt.want, tt.missing)
		if got != tt.got || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("choose(%s, %v) = %s, %v; want %s, %q", tt.want, tt.missing, got, err, tt.got, tt.err)
		}
	}
}

func TestParseMechanism(t *testing.T) {
	for in, want := range map[string]Mechanism{"": MechanismAuto, "auto": MechanismAuto, "task_work": MechanismTaskWork, "switch_out": MechanismSwitchOut} {
		if got, err := ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %s, %v", in, got, err)
		}
	}
	if _, err := ParseMechanism("kprobe"); err == nil {
		t.Error("no error for an unknown mechanism")
	}
}
