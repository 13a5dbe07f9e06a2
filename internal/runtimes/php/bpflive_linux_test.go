package php

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// bpfLiveWalks is how many samples TestBPFWalkLive walks per workload.
const bpfLiveWalks = 200

// TestBPFWalkLive runs testdata/workloads/phpwork.php on each Debian PHP,
// with and without opcache and its JITs, and in php-fpm, samples it
// (cpu-clock) with sample_php (bpf/phpwalk.bpf.c) and names the frames of
// each walk: at least 90% must be Spinner::spin <- work <- {main}, work and
// {main} at their call's line, {main} the run's entry; spin at a line of
// the loop when the sampled pc is in execute_ex (the opline from the VM's
// register), else at one of its lines or none (JIT code keeps no current
// opline in memory).
func TestBPFWalkLive(t *testing.T) {
	testutil.RequireBPF(t)
	_ = memlock.Raise()
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			p := testutil.DebianPHP(t, v)
			for _, mode := range []struct {
				name    string
				opcache bool
				jit     string
			}{
				{"interpreter", false, ""},
				{"opcache", true, ""},
				{"jit-function", true, "function"},
				{"jit-tracing", true, "tracing"},
			} {
				t.Run(mode.name, func(t *testing.T) {
					cmd := testutil.StartPHP(t, p, p.Args(mode.opcache, mode.jit), "30")
					bpfWalkPID(t, detectFile(t, p.Path), cmd.Process.Pid, p.Path, lines)
				})
			}
			t.Run("fpm", func(t *testing.T) {
				in := detectFile(t, p.FPM)
				sock, master := testutil.StartFPM(t, p, p.Args(false, ""))
				go testutil.FastCGIGet(sock, testutil.Workload(t, "phpwork.php"), "seconds=20", time.Minute) //nolint:errcheck // ends with the test
				bpfWalkPID(t, in, busyWorker(t, in, master, p.FPM), p.FPM, lines)
			})
		})
	}
}

func detectFile(t *testing.T, path string) *Interpreter {
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	in, err := Detect(f)
	require.NoError(t, err)
	return in
}

// bpfWalkPID samples process pid, which runs phpwork.php with the engine
// file exe, until bpfLiveWalks walks, and checks them.
func bpfWalkPID(t *testing.T, in *Interpreter, pid int, exe string, lines map[string]int64) {
	spec, err := bpf.LoadPhpwalk()
	require.NoError(t, err)
	require.NoError(t, spec.Variables["target_pid"].Set(uint32(pid)))
	var objs bpf.PhpwalkObjects
	require.NoError(t, spec.LoadAndAssign(&objs, nil))
	defer objs.Close()
	bias := testutil.LoadBias(t, pid, exe)
	proc, err := in.WalkerProc(nil, bias)
	require.NoError(t, err)
	require.NoError(t, objs.PhpProcs.Put(uint32(pid), proc))

	rd, err := ringbuf.NewReader(objs.Walks)
	require.NoError(t, err)
	defer rd.Close()
	stop := sampleThread(t, pid, objs.SamplePhp)
	var records []bpf.PhpwalkPhpWalkRecord
	deadline := time.Now().Add(testutil.Patient(20 * time.Second))
	rd.SetDeadline(deadline)
	for len(records) < bpfLiveWalks {
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		require.NoError(t, err)
		var r bpf.PhpwalkPhpWalkRecord
		_, err = binary.Decode(rec.RawSample, binary.NativeEndian, &r)
		require.NoError(t, err)
		records = append(records, r)
	}
	stop()
	require.Len(t, records, bpfLiveWalks, "walks of %d in %s", pid, testutil.Patient(20*time.Second))

	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	naming := in.Process(mem, 0)
	script := testutil.Workload(t, "phpwork.php")
	exStart, exEnd := in.ExecuteExStart+bias, in.ExecuteExEnd+bias
	chains := map[string]int{}
	spinLines := map[string]int{}
	good, inVM := 0, 0
	for _, r := range records {
		vm := r.Pc >= exStart && r.Pc < exEnd
		if vm {
			inVM++
		}
		type named struct {
			function, file string
			line           int64
			entry          bool
		}
		var names []string
		var got []named
		for _, w := range r.Frames[:r.N] {
			f := FrameOfWord(w)
			fr, err := naming.Read(f.Object(), f.Position, time.Now())
			if err != nil {
				names = append(names, "?"+err.Error())
				continue
			}
			got = append(got, named{fr.Function, fr.File, fr.Line, f.Entry})
			entry := ""
			if f.Entry {
				entry = "*"
			}
			names = append(names, fmt.Sprintf("%s:%d%s", fr.Function, fr.Line, entry))
		}
		chains[fmt.Sprintf("end %d: %s", r.End, strings.Join(names, " <- "))]++
		if r.End != endRoot || len(got) != 3 || len(names) != 3 {
			continue
		}
		where := "elsewhere"
		if vm {
			where = "execute_ex"
		}
		spin := got[0].line
		spinLines[fmt.Sprintf("%s:%d", where, spin)]++
		// In execute_ex the opline is the register's: a line of the loop.
		lineOK := spin == lines["spin_for"] || spin == lines["spin_loop"]
		if !vm {
			lineOK = spin == 0 || spin >= lines["spin_first"] && spin <= lines["spin_last"]
		}
		want := []named{
			{"Spinner::spin", script, spin, false},
			{"work", script, lines["work_call"], false},
			{"{main}", script, lines["main_call"], true},
		}
		if lineOK && fmt.Sprint(got) == fmt.Sprint(want) {
			good++
		}
	}
	var report []string
	for c, n := range chains {
		report = append(report, fmt.Sprintf("%3d × %s", n, c))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(report)))
	t.Logf("%d of %d walks spin <- work <- {main}; %d samples in execute_ex; spin at %v; the walks:\n%s",
		good, len(records), inVM, spinLines, strings.Join(report, "\n"))
	require.GreaterOrEqual(t, good, len(records)*9/10, "walks finding Spinner::spin <- work <- {main} at the workload's lines")
}

// sampleThread samples thread tid (cpu-clock, every millisecond of its
// CPU time) with prog until the returned function is called.
func sampleThread(t *testing.T, tid int, prog *ebpf.Program) func() {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(time.Millisecond),
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	require.NoError(t, err, "open cpu-clock event on %d", tid)
	require.NoError(t, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()), "attach sample_php")
	require.NoError(t, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0))
	return func() {
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		_ = unix.Close(fd)
	}
}
