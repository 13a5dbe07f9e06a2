//go:build linux

package sampler

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestNewProcesses starts a short process after Open: it must be announced
// once on NewProcesses while it runs, and forgotten (seen_pids) once it
// exited, so a process reusing its pid would be announced again.
func TestNewProcesses(t *testing.T) {
	testutil.RequireBPF(t)
	s := openSampler(t, Options{SamplesPerSecond: 99})
	bin := testutil.BuildC(t, "cpuburn.c")

	cmd := testutil.StartWorkload(t, bin, "0.2")
	pid := uint32(cmd.Process.Pid)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	announced, others := 0, 0
	announcedWhileRunning := false
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case p, ok := <-s.NewProcesses():
			if !ok {
				t.Fatal("NewProcesses closed before Close")
			}
			if p != pid {
				others++
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
	t.Logf("pid %d announced %d times (while running: %v); %d other pids", pid, announced, announcedWhileRunning, others)
	if announced != 1 || !announcedWhileRunning {
		t.Errorf("pid %d announced %d times, while running %v; want once while it ran", pid, announced, announcedWhileRunning)
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
