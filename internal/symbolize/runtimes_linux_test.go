//go:build linux

package symbolize

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/report"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A method's code object, read from a live interpreter's memory, names
// its qualified name (3.11+), file and the line of its first instruction
// (as the interpreter's dis module says); a process without
// CPython and an address that is no code object leave the frame unnamed,
// counted by reason.
func TestPythonFrameNames(t *testing.T) {
	const cpython = report.FramePython // the runtime's name
	const script = `
import dis, sys
class Box:
    def method(self):
        return 1
c = Box.method.__code__
print(id(c), min(dis.findlinestarts(c))[1], flush=True)
sys.stdin.read()
`
	sleeper := testutil.StartChild(t, exec.Command("sleep", "60"))
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Name, func(t *testing.T) {
			cmd := exec.Command(in.Path, "-c", script)
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			c := testutil.StartChild(t, cmd)
			t.Cleanup(func() { _ = stdin.Close(); _ = c.Wait(t, testutil.Patient(time.Minute)) })
			line := c.Line(t, testutil.Patient(time.Minute))
			f := strings.Fields(line)
			require.Len(t, f, 2, line)
			addr, _ := strconv.ParseUint(f[0], 10, 64)
			line0, _ := strconv.Atoi(f[1])

			s := New(Options{Proc: procfs.FS{Root: "/proc"}})
			defer s.Close()
			pid := uint32(c.Pid())
			want := "Box.method"
			if in.Minor() < 11 {
				want = "method" // no co_qualname before 3.11
			}
			for range 2 { // read, then cached
				got := s.Runtime(pid, cpython, addr, 0, 0)[0]
				require.Equal(t, report.Frame{Address: addr, Function: want, File: "<string>", Line: int64(line0), Type: report.FramePython}, got)
			}
			require.Empty(t, s.Runtime(pid, cpython, addr+8, 0, 0)[0].Function, "an address inside the code object")
			require.Empty(t, s.Runtime(uint32(sleeper.Pid()), cpython, addr, 0, 0)[0].Function, "a process without CPython")
			st := s.Stats()
			require.Equal(t, uint64(2), st.RuntimeFrames[cpython])
			require.Equal(t, map[string]uint64{RuntimeBadObject: 1, RuntimeNoInterpreter: 1}, st.RuntimeUnsymbolized[cpython])
		})
	}
}
