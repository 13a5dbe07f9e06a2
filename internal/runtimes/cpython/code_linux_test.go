package cpython

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// workloadReport is the line testdata/frames.py prints.
type workloadReport struct {
	ThreadID uint64 `json:"thread_id"`
	Codes    []struct {
		Addr        uint64  `json:"addr"`
		Name        string  `json:"name"`
		QualName    string  `json:"qualname"`
		File        string  `json:"file"`
		FirstLineNo int     `json:"firstlineno"`
		Units       int     `json:"units"`
		Lines       [][]any `json:"lines"` // [index, line or null]
	} `json:"codes"`
}

// TestReadCodeLive runs testdata/frames.py on each interpreter and checks
// that what ReadCode and Line make of its code objects, read from
// /proc/PID/mem, is what the interpreter says of them; then walks the
// blocked main thread's frames with the offsets as the BPF program does.
func TestReadCodeLive(t *testing.T) {
	for _, tc := range []struct{ exe, runtimeFile string }{
		{pyenv + "3.9.18/bin/python3.9", pyenv + "3.9.18/lib/libpython3.9.so.1.0"},
		{pyenv + "3.10.13/bin/python3.10", pyenv + "3.10.13/lib/libpython3.10.so.1.0"},
		{pyenv + "3.11.7/bin/python3.11", pyenv + "3.11.7/lib/libpython3.11.so.1.0"},
		{pyenv + "3.12.1/bin/python3.12", pyenv + "3.12.1/lib/libpython3.12.so.1.0"},
		{pyenv + "3.13.0/bin/python3.13", pyenv + "3.13.0/lib/libpython3.13.so.1.0"},
		{"/usr/bin/python3.11", "/usr/bin/python3.11"},
	} {
		t.Run(tc.exe, func(t *testing.T) {
			py, err := Detect(openELF(t, tc.runtimeFile))
			require.NoError(t, err)
			// A directory name with non-ASCII characters: the file name is
			// a compact str of kind 2.
			script := filepath.Join(t.TempDir(), "pŷthon-测试", "frames.py")
			src, err := os.ReadFile("testdata/frames.py")
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(filepath.Dir(script), 0o755))
			require.NoError(t, os.WriteFile(script, src, 0o644))

			pid, report := startWorkload(t, tc.exe, script)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()

			require.Len(t, report.Codes, 9)
			for _, want := range report.Codes {
				c, err := py.Offsets.ReadCode(mem, want.Addr)
				require.NoError(t, err, want.QualName)
				require.Equal(t, want.Name, c.Name)
				require.Equal(t, want.QualName, c.QualName)
				require.Equal(t, script, c.File)
				require.Equal(t, want.FirstLineNo, c.FirstLine)
				require.Equal(t, want.Units, c.Instructions)
				for _, l := range want.Lines {
					line := want.FirstLineNo // none: Line gives the first line
					if l[1] != nil {
						line = int(l[1].(float64))
					}
					require.Equal(t, line, c.Line(uint32(l[0].(float64))), "%s index %v", want.QualName, l[0])
				}
				require.Equal(t, want.FirstLineNo, c.Line(uint32(want.Units)), "past the end")
			}

			// The report is printed just before wait(): let it block there.
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
				return err == nil && strings.HasPrefix(string(b), "0 0x0 ") // read(0, ...)
			}, 10*time.Second, 10*time.Millisecond)
			bias := testutil.LoadBias(t, pid, tc.runtimeFile)
			frames := walkThread(t, mem, &py.Offsets, py.RuntimeAddr+bias, report.ThreadID)
			var got []string
			for _, f := range frames {
				c, err := py.Offsets.ReadCode(mem, f.code)
				require.NoError(t, err)
				got = append(got, fmt.Sprintf("%s:%d entry=%v", c.QualName, c.Line(f.instruction), f.entry))
			}
			waitLine, moduleLine := markedLine(t, src, "# wait: blocked here"), markedLine(t, src, "# module: blocked here")
			require.Equal(t, []string{
				fmt.Sprintf("wait:%d entry=%v", waitLine, py.Offsets.EntryKind == EntryEveryFrame),
				fmt.Sprintf("<module>:%d entry=true", moduleLine),
			}, got)
		})
	}
}

// startWorkload starts script on python and returns its pid and report;
// the process ends when the test does.
func startWorkload(t *testing.T, python, script string) (int, workloadReport) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		testutil.SkipOrFail(t, "no %s on this machine", python)
	}
	cmd := exec.Command(python, script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	c := testutil.StartChild(t, cmd)
	t.Cleanup(func() { stdin.Close() }) // runs before the Child's kill
	line := c.Line(t, testutil.Patient(time.Minute))
	var r workloadReport
	require.NoError(t, json.Unmarshal([]byte(line), &r))
	return c.Pid(), r
}

func markedLine(t *testing.T, src []byte, marker string) int {
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, marker) {
			return i + 1
		}
	}
	t.Fatalf("no %q in the workload", marker)
	return 0
}

type walkedFrame struct {
	code        uint64
	instruction uint32
	entry       bool // the outermost frame of an eval call
}

// walkThread follows the frames of the thread threadID as the BPF program
// does, the shim frames of 3.12+ left out.
func walkThread(t *testing.T, mem io.ReaderAt, o *Offsets, runtime, threadID uint64) []walkedFrame {
	t.Helper()
	word := func(addr uint64, size int) uint64 {
		b, err := runtimes.ReadMem(mem, addr, size)
		require.NoError(t, err)
		var v [8]byte
		copy(v[:], b)
		return binary.LittleEndian.Uint64(v[:])
	}
	interp := word(runtime+uint64(o.RuntimeInterpretersHead), 8)
	thread := word(interp+uint64(o.InterpThreadsHead), 8)
	for i := 0; thread != 0 && word(thread+uint64(o.ThreadID), 8) != threadID; i++ {
		require.Less(t, i, 64, "thread not found")
		thread = word(thread+uint64(o.ThreadNext), 8)
	}
	require.NotZero(t, thread, "thread not found")
	frame := word(thread+uint64(o.ThreadFrame), 8)
	if o.ThreadFrameViaCFrame {
		frame = word(frame+uint64(o.CFrameCurrentFrame), 8)
	}
	var frames []walkedFrame
	for ; frame != 0; frame = word(frame+uint64(o.FramePrevious), 8) {
		require.Less(t, len(frames), 32)
		code := word(frame+uint64(o.FrameCode), 8)
		f := walkedFrame{code: code, entry: o.EntryKind == EntryEveryFrame}
		switch o.InstructionKind {
		case InstructionByteOffset:
			f.instruction = uint32(word(frame+uint64(o.FrameInstruction), 4)) / 2
		case InstructionIndex:
			f.instruction = uint32(word(frame+uint64(o.FrameInstruction), 4))
		case InstructionPointer:
			f.instruction = uint32((word(frame+uint64(o.FrameInstruction), 8) - code - uint64(o.CodeAdaptive)) / 2)
		}
		owner := word(frame+uint64(o.FrameOwner), 1)
		switch {
		case o.EntryKind == EntryFlag:
			f.entry = owner != 0
		case o.EntryKind == EntryShimFrame && owner == FrameOwnedByCStack:
			require.NotEmpty(t, frames, "a shim frame first")
			frames[len(frames)-1].entry = true
			continue
		}
		frames = append(frames, f)
	}
	return frames
}
