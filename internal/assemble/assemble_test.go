package assemble

import (
	"errors"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/attrkey"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
)

// fakeSymbols names every address "k<addr>" (kernel) or "u<pid>:<addr>"
// (user); address 0 stays unresolved; user addresses from 0x7f0000000000 on
// are JIT code.
type fakeSymbols struct{ calls int }

func (f *fakeSymbols) Kernel(addrs []uint64) []report.Frame {
	f.calls++
	out := make([]report.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = report.Frame{Address: a, Function: fmt.Sprintf("k%x", a), Type: report.FrameKernel}
	}
	return out
}

func (f *fakeSymbols) User(pid uint32, addrs []uint64) []report.Frame {
	f.calls++
	out := make([]report.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = report.Frame{Address: a, Type: report.FrameNative}
		if a >= 0x7f0000000000 {
			out[i].Type = report.FrameJIT
		}
		if a != 0 {
			out[i].Function = fmt.Sprintf("u%d:%x", pid, a)
		}
	}
	return out
}

// UserExited names what it can "x<pid>:<addr>": what was read before.
func (f *fakeSymbols) UserExited(pid uint32, addrs []uint64) []report.Frame {
	out := f.User(pid, addrs)
	for i := range out {
		if out[i].Function != "" {
			out[i].Function = fmt.Sprintf("x%d:%x", pid, addrs[i])
		}
	}
	return out
}

func (f *fakeSymbols) Runtime(pid uint32, _ string, code uint64, instruction uint32, _ uint64) []report.Frame {
	return []report.Frame{{Address: code, Function: fmt.Sprintf("py%d:%x@%d", pid, code, instruction), Type: report.FramePython}}
}

type fakeIdentities map[uint32]string

func (f fakeIdentities) Resolve(pid uint32) (report.Identity, error) {
	exe, ok := f[pid]
	if !ok {
		return report.Identity{PID: pid}, errors.New("gone")
	}
	return report.Identity{PID: pid, ExePath: exe}, nil
}

func TestAssemble(t *testing.T) {
	stacks := []capture.RawStack{
		{PID: 20, TID: 21, Comm: "worker", Frames: capture.StackFrames([]uint64{0xff01}, []uint64{0x10, 0}), Value: 5},
		{PID: 10, TID: 10, Frames: capture.StackFrames(nil, []uint64{0x20}), Value: 2},
		{PID: 20, TID: 20, Frames: capture.StackFrames(nil, []uint64{0x30}), Value: 1},
		{PID: 30, TID: 30, Frames: capture.StackFrames(nil, []uint64{0x40}), Value: 0}, // empty: dropped
		{PID: 40, TID: 40, Frames: capture.StackFrames(nil, []uint64{0x50}), Value: 7}, // vanished process: kept
	}
	tests := []struct {
		name          string
		keep          func(report.Identity) bool
		wantPIDs      []uint32
		wantFiltered  int64
		wantUnsymbols int
	}{
		{name: "everything", wantPIDs: []uint32{10, 20, 40}, wantUnsymbols: 1},
		{
			name:         "executable filter",
			keep:         func(id report.Identity) bool { return id.ExePath == "/bin/b" },
			wantPIDs:     []uint32{20},
			wantFiltered: 9, wantUnsymbols: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Assembler{
				Symbols:    &fakeSymbols{},
				Identities: fakeIdentities{10: "/bin/a", 20: "/bin/b"},
				ThreadName: func(pid, tid uint32) string { return fmt.Sprintf("t%d", tid) },
				Keep:       tt.keep,
			}
			start := time.Unix(100, 0)
			prof, st := a.Assemble(report.KindCPU, start, start.Add(time.Second), 1e7, stacks)
			assert.Equal(t, report.KindCPU, prof.Kind)
			assert.Equal(t, int64(1e7), prof.Period)
			var pids []uint32
			for _, p := range prof.Processes {
				pids = append(pids, p.Identity.PID)
			}
			assert.Equal(t, tt.wantPIDs, pids)
			assert.Equal(t, len(tt.wantPIDs), st.Processes)
			assert.Equal(t, tt.wantFiltered, st.FilteredValues)
			assert.Equal(t, tt.wantUnsymbols, st.Unsymbolized)
		})
	}
}

// The stacks of a process whose identity could not be read (it exited) are
// symbolized with what was read of it before, reading nothing more.
func TestAssembleExitedProcessReadsNothing(t *testing.T) {
	stacks := []capture.RawStack{
		{PID: 10, TID: 10, Frames: capture.StackFrames(nil, []uint64{0x20}), Value: 1},
		{PID: 40, TID: 40, Frames: capture.StackFrames(nil, []uint64{0x50}), Value: 1},
	}
	a := &Assembler{Symbols: &fakeSymbols{}, Identities: fakeIdentities{10: "/bin/a"}}
	prof, _ := a.Assemble(report.KindCPU, time.Time{}, time.Time{}, 0, stacks)
	got := map[uint32]string{}
	for _, p := range prof.Processes {
		require.Len(t, p.Samples, 1)
		require.Len(t, p.Samples[0].Frames, 1)
		got[p.Identity.PID] = p.Samples[0].Frames[0].Function
	}
	assert.Equal(t, map[uint32]string{10: "u10:20", 40: "x40:50"}, got)
}

func TestAssembleFrameOrderAndThreadNames(t *testing.T) {
	a := &Assembler{
		Symbols:    &fakeSymbols{},
		Identities: fakeIdentities{20: "/bin/b"},
		ThreadName: func(pid, tid uint32) string { return "from-proc" },
	}
	prof, st := a.Assemble(report.KindOffCPU, time.Time{}, time.Time{}, 0, []capture.RawStack{
		{PID: 20, TID: 21, Comm: "worker", Frames: capture.StackFrames([]uint64{0xff01, 0xff02}, []uint64{0x10, 0x11}), Value: 5},
		{PID: 20, TID: 22, Frames: capture.StackFrames(nil, []uint64{0x12}), Value: 1},
	})
	require.Len(t, prof.Processes, 1)
	samples := prof.Processes[0].Samples
	require.Len(t, samples, 2)
	var names []string
	for _, f := range samples[0].Frames {
		names = append(names, f.Function)
	}
	assert.Equal(t, []string{"kff01", "kff02", "u20:10", "u20:11"}, names, "kernel leaf first, then user")
	assert.Equal(t, "worker", samples[0].ThreadName, "kernel-recorded name wins")
	assert.Equal(t, "from-proc", samples[1].ThreadName)
	assert.Equal(t, 5, st.Frames)
}

// A sample that lost a stack keeps its value, with one marker frame in the
// lost stack's place; a kernel thread's absent user stack is no loss.
func TestAssembleMarksLostStacks(t *testing.T) {
	a := &Assembler{Symbols: &fakeSymbols{}, Identities: fakeIdentities{20: "/bin/b"}}
	prof, st := a.Assemble(report.KindCPU, time.Time{}, time.Time{}, 1, []capture.RawStack{
		{PID: 20, TID: 20, Frames: capture.StackFrames([]uint64{0xff01}, nil), UserLoss: capture.StackMapFull, Value: 3},
		{PID: 20, TID: 21, Frames: capture.StackFrames(nil, []uint64{0x10}), KernelLoss: capture.StackHashCollision, Value: 2},
		{PID: 20, TID: 22, UserLoss: capture.StackCaptureFailed, KernelLoss: capture.StackMissing, Value: 1},
		{PID: 20, TID: 23, Frames: capture.StackFrames([]uint64{0xff02}, nil), Value: 4}, // kernel thread
	})
	require.Len(t, prof.Processes, 1)
	var got [][]string
	var total int64
	for _, s := range prof.Processes[0].Samples {
		var names []string
		for _, f := range s.Frames {
			names = append(names, f.Function+"/"+f.Type)
		}
		got = append(got, names)
		total += s.Value
	}
	assert.Equal(t, [][]string{
		{"kff01/kernel", "[user stack lost: stack map full]/unknown"},
		{"[kernel stack lost: hash collision]/unknown", "u20:10/native"},
		{"[kernel stack lost: missing at drain]/unknown", "[user stack lost: capture failed]/unknown"},
		{"kff02/kernel"},
	}, got)
	assert.Equal(t, int64(10), total, "no value is lost with a stack")
	assert.Zero(t, st.Unsymbolized, "markers are named")
}

func TestDropTracingFrames(t *testing.T) {
	names := func(fs []report.Frame) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Function)
		}
		return out
	}
	frames := func(fns ...string) []report.Frame {
		var out []report.Frame
		for _, fn := range fns {
			out = append(out, report.Frame{Function: fn})
		}
		return out
	}
	tests := []struct {
		in, want []string
	}{
		{in: []string{"bpf_prog_6deef7357e7b4530_offcpu_switch", "bpf_trace_run4", "__schedule", "schedule"}, want: []string{"__schedule", "schedule"}},
		{in: []string{"__schedule", "bpf_trace_run4"}, want: []string{"__schedule", "bpf_trace_run4"}},
		{in: []string{"bpf_prog_x"}, want: nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, names(dropTracingFrames(frames(tt.in...))))
	}
}

// A process whose identity could not be read is named by what the kernel
// recorded: never left without a service name when its comm is known.
func TestAssembleNamesUnreadProcesses(t *testing.T) {
	tests := []struct {
		name   string
		stacks []capture.RawStack
		want   any // service.name, nil for none
	}{
		{"main thread's comm", []capture.RawStack{
			{PID: 7, TID: 8, Comm: "worker-1", Frames: capture.StackFrames(nil, []uint64{1}), Value: 1},
			{PID: 7, TID: 7, Comm: "make", Frames: capture.StackFrames(nil, []uint64{1}), Value: 1},
		}, "make"},
		{"any thread's comm", []capture.RawStack{{PID: 7, TID: 9, Comm: "cc1", Frames: capture.StackFrames(nil, []uint64{1}), Value: 1}}, "cc1"},
		{"kernel thread: no user stack taken", []capture.RawStack{{PID: 7, TID: 7, Comm: "kworker/0:1-events", Frames: capture.StackFrames([]uint64{1}, nil), Value: 1}},
			attrkey.KernelServiceName},
		{"user stack lost is not a kernel thread", []capture.RawStack{
			{PID: 7, TID: 7, Comm: "app", Frames: capture.StackFrames([]uint64{1}, nil), UserLoss: capture.StackMapFull, Value: 1},
		}, "app"},
		{"nothing known", []capture.RawStack{{PID: 7, TID: 7, Frames: capture.StackFrames(nil, []uint64{1}), Value: 1}}, nil},
		// Read while it exited: no executable, no service name, no error
		// (the unknown_service series a busy host showed in Pyroscope).
		{"read without a name", []capture.RawStack{{PID: 77, TID: 77, Comm: "bash", Frames: capture.StackFrames(nil, []uint64{1}), Value: 1}}, "bash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Assembler{Symbols: &fakeSymbols{}, Identities: fakeIdentities{77: ""}}
			prof, _ := a.Assemble(report.KindCPU, time.Time{}, time.Time{}, 0, tt.stacks)
			require.Len(t, prof.Processes, 1)
			assert.Equal(t, tt.want, prof.Processes[0].Identity.Attributes[attrkey.ServiceName])
		})
	}
}

// Perf-map frames take the frame type of the process's runtime, from its
// identity; native frames keep theirs.
func TestJITFrameTypes(t *testing.T) {
	tests := []struct {
		exe  string
		want string
	}{
		{"node", report.FrameV8JS},
		{"nodejs", report.FrameV8JS},
		{"python3.12", report.FramePython},
		{"java", report.FrameJVM},
		{"server", report.FrameNative},
	}
	for _, tt := range tests {
		t.Run(tt.exe, func(t *testing.T) {
			a := &Assembler{Symbols: &fakeSymbols{}, Identities: exeNames{fakeIdentities{9: "/usr/bin/" + tt.exe}}}
			prof, _ := a.Assemble(report.KindCPU, time.Time{}, time.Time{}, 1, []capture.RawStack{{
				PID: 9, TID: 9, Value: 1,
				Frames: capture.StackFrames(nil, []uint64{0x7f0000001000, 0x401000}),
			}})
			require.Len(t, prof.Processes, 1)
			frames := prof.Processes[0].Samples[0].Frames
			require.Len(t, frames, 2)
			assert.Equal(t, tt.want, frames[0].Type)
			assert.Equal(t, report.FrameNative, frames[1].Type)
		})
	}
}

// exeNames adds the executable's base name to fakeIdentities' identities.
type exeNames struct{ fakeIdentities }

func (e exeNames) Resolve(pid uint32) (report.Identity, error) {
	id, err := e.fakeIdentities.Resolve(pid)
	id.ExeName = path.Base(id.ExePath)
	return id, err
}
