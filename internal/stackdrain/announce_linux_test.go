//go:build linux

package stackdrain

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// announceProgram returns a program that writes entry to ring each run, as
// bpf/announce.h does.
func announceProgram(t *testing.T, ring *ebpf.Map, entry uint32) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -8, int64(int32(entry)), asm.Word),
			asm.LoadMapPtr(asm.R1, ring.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.Mov.Imm(asm.R3, 4),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// Announcements written while the reader waits wake it (in Go's poller),
// arrive within about batchDelay, decoded, and Close ends the reader.
func TestAnnouncerBatches(t *testing.T) {
	testutil.RequireBPF(t)
	ring, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	a, err := StartAnnouncer(ring)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.ready.SetReadDeadline(time.Time{}); err != nil {
		t.Errorf("the ring is not in Go's poller (the reader falls back to polling): %v", err)
	}
	exit := announceProgram(t, ring, 42|announceExit)

	for round := range 2 { // the reader waits again after a batch
		start := time.Now()
		const n = 5
		for range n {
			if _, err := exit.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			select {
			case ev, ok := <-a.Events():
				if !ok {
					t.Fatalf("round %d: events closed before Close", round)
				}
				if want := (capture.ProcessEvent{PID: 42, Exit: true}); ev != want {
					t.Errorf("round %d: event %d = %+v, want %+v", round, i, ev, want)
				}
				if got := time.Since(start); i == 0 && got > 10*batchDelay {
					t.Errorf("round %d: first event after %v, want about batchDelay %v", round, got, batchDelay)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: event %d of %d not read", round, i, n)
			}
		}
	}
	if d := a.TakeDrops(); d != 0 {
		t.Errorf("%d events dropped", d)
	}
	closed := make(chan error)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the reader")
	}
	if _, ok := <-a.Events(); ok {
		t.Error("events not closed by Close")
	}
}
