//go:build linux

package sampler

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestNewProcesses starts a short process after Open: it must be announced
// once on NewProcesses while it runs, announced as exited once, and
// forgotten (seen_pids) once it exited, so a process reusing its pid would
// be announced again.
func TestNewProcesses(t *testing.T) {
	testutil.RequireBPF(t)
	s := openSampler(t, Options{SamplesPerSecond: 99})
	bin := testutil.BuildC(t, "cpuburn.c")

	child := testutil.StartWorkloadChild(t, bin, "0.2")
	pid := uint32(child.Pid())
	exited := child.Exited()

	announced, exits, others := 0, 0, 0
	announcedWhileRunning := false
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case p, ok := <-s.NewProcesses():
			if !ok {
				t.Fatal("NewProcesses closed before Close")
			}
			if p.PID == pid && p.Exec {
				// The child was sampled before it exec'ed the workload:
				// that announcement was of the test binary's fork.
				announced, announcedWhileRunning = 0, false
			}
			if p.PID != pid || p.Exec || p.Rescan {
				others++
				continue
			}
			if p.Exit {
				exits++
				continue
			}
			announced++
			select {
			case <-exited:
			default:
				announcedWhileRunning = true
			}
		case <-exited:
			// Collect what may still be in flight, then stop.
			timeout = time.After(200 * time.Millisecond)
			exited = nil
		case <-timeout:
			if exited != nil {
				t.Fatalf("workload %d did not exit", pid)
			}
			done = true
		}
	}
	t.Logf("pid %d announced %d times (while running: %v), exited %d times; %d other events", pid, announced, announcedWhileRunning, exits, others)
	if announced != 1 || !announcedWhileRunning {
		t.Errorf("pid %d announced %d times, while running %v; want once while it ran", pid, announced, announcedWhileRunning)
	}
	if exits != 1 {
		t.Errorf("pid %d announced as exited %d times, want once", pid, exits)
	}

	var v uint8
	if err := s.objs.SeenPids.Lookup(pid, &v); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("seen_pids still holds exited pid %d (lookup: %v)", pid, err)
	}
	_, st, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	if st.NewProcessDrops != 0 {
		t.Errorf("stats %+v: notifications dropped", st)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range s.NewProcesses() { // drained and closed by Close
	}
}

// TestExecAnnounced: a process that burns CPU, then execs another program,
// is announced, then reported as exec'ed (what was read of the old program
// is stale), then announced again for the new one, then as exited.
func TestExecAnnounced(t *testing.T) {
	testutil.RequireBPF(t)
	s := openSampler(t, Options{SamplesPerSecond: 99})
	bin := testutil.BuildC(t, "cpuburn.c")
	// The shell burns CPU in its own loop (no child process: a loop on
	// date spent its time in the children, and the shell was sometimes
	// never sampled), about a second, then becomes cpuburn.
	child := testutil.StartWorkloadChild(t, "sh", "-c",
		`i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; exec "$0" 0.5`, bin)
	pid := uint32(child.Pid())
	exited := child.Exited()

	var got []capture.ProcessEvent
	timeout := time.After(15 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-s.NewProcesses():
			if ev.PID == pid {
				got = append(got, ev)
			}
		case <-exited:
			timeout, exited = time.After(200*time.Millisecond), nil
		case <-timeout:
			if exited != nil {
				t.Fatalf("workload %d did not exit", pid)
			}
			done = true
		}
	}
	want := []capture.ProcessEvent{{PID: pid}, {PID: pid, Exec: true}, {PID: pid}, {PID: pid, Exit: true}}
	// The child may be sampled before it execs sh: that announcement and
	// its exec are the test binary's fork's.
	for len(got) > len(want) && got[0] == (capture.ProcessEvent{PID: pid}) && got[1] == (capture.ProcessEvent{PID: pid, Exec: true}) {
		got = got[2:]
	}
	if len(got) != len(want) {
		t.Fatalf("events of pid %d: %+v, want %+v", pid, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d of pid %d: %+v, want %+v", i, pid, got[i], want[i])
		}
	}
}
