//go:build linux

package offcpu

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// detachRoundsEnv sets how many attach/detach rounds TestDetachUnderSwitches
// runs per variant (default 3). The kernel matrix's detach stress
// (go run ./test/kernels -checks detach) raises it.
const detachRoundsEnv = "BPFPROFILER_DETACH_ROUNDS"

// TestDetachUnderSwitches attaches and detaches sched_switch programs over
// and over while two threads switch tens of thousands of times a second,
// so that the tracepoint's static key is toggled while __schedule runs on
// every CPU. Variants: the tracer as the collector runs it (switch-out walk
// with unwind tables: a tail call through a prog array, freed at Close),
// the tracer with frame pointers, and a control that is no code of ours
// beyond two instructions (an empty tp_btf program, no prog array). A
// kernel or emulator that cannot patch a live tracepoint site crashes in
// the control too; one that crashes only in the tracer points at us.
func TestDetachUnderSwitches(t *testing.T) {
	testutil.RequireBPF(t)
	rounds := 3
	if s := os.Getenv(detachRoundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, detachRoundsEnv)
		rounds = n
	}
	switches := startPingPong(t)
	mech := mechanisms(t)[0]
	variants := []struct {
		name  string
		cycle func(t *testing.T)
	}{
		{"empty_program", cycleEmptyProgram},
		{"tracer_frame_pointer", func(t *testing.T) { cycleTracer(t, mech, nil) }},
		{"tracer_tables", func(t *testing.T) {
			tables, err := unwinder.OpenTables(procfs.FS{Root: "/proc"}, 0)
			require.NoError(t, err)
			defer func() { require.NoError(t, tables.Close()) }()
			cycleTracer(t, mech, tables)
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			before := switches()
			start := time.Now()
			for range rounds {
				v.cycle(t)
			}
			n := switches() - before
			t.Logf("%d attach/detach rounds in %v, %d round trips meanwhile (%.0f/s)",
				rounds, time.Since(start).Round(time.Millisecond), n, float64(n)/time.Since(start).Seconds())
			if n == 0 {
				t.Fatal("no thread switched while the programs were detached: the test proves nothing")
			}
		})
	}
}

// cycleTracer opens the off-CPU tracer, lets it record for a moment and
// closes it.
func cycleTracer(t *testing.T, mech Mechanism, tables *unwinder.Tables) {
	tr, err := Open(Options{MinBlock: time.Microsecond, Mechanism: mech, Unwind: tables})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	_, _, err = tr.Drain()
	require.NoError(t, err)
	require.NoError(t, tr.Close())
}

// cycleEmptyProgram loads an empty tp_btf sched_switch program, attaches
// it for a moment and frees it.
func cycleEmptyProgram(t *testing.T) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.Tracing,
		AttachType: ebpf.AttachTraceRawTp,
		AttachTo:   "sched_switch",
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	require.NoError(t, err)
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Close())
}

// startPingPong runs two OS threads passing a byte back and forth through
// two pipes until the test ends; it returns the round trips so far.
func startPingPong(t *testing.T) func() uint64 {
	var a, b [2]int
	require.NoError(t, unix.Pipe(a[:]))
	require.NoError(t, unix.Pipe(b[:]))
	var (
		mu    sync.Mutex
		trips uint64
		wg    sync.WaitGroup
	)
	wg.Add(2)
	go func() { // echoes what arrives on a to b
		defer wg.Done()
		runtime.LockOSThread()
		buf := make([]byte, 1)
		for {
			if n, err := unix.Read(a[0], buf); n != 1 || err != nil {
				_ = unix.Close(b[1])
				return
			}
			if _, err := unix.Write(b[1], buf); err != nil {
				return
			}
		}
	}()
	stop := make(chan struct{})
	go func() { // sends on a, waits for the echo on b
		defer wg.Done()
		runtime.LockOSThread()
		buf := []byte{1}
		for {
			select {
			case <-stop:
				_ = unix.Close(a[1])
				return
			default:
			}
			if _, err := unix.Write(a[1], buf); err != nil {
				return
			}
			if n, err := unix.Read(b[0], buf); n != 1 || err != nil {
				return
			}
			mu.Lock()
			trips++
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		for _, fd := range []int{a[0], b[0]} {
			_ = unix.Close(fd)
		}
	})
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return trips
	}
}
