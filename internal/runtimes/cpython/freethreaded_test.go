package cpython

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Free-threaded builds (3.13.15 and 3.14.7, --disable-gil, with DWARF) are
// detected with the offsets gdb prints from their DWARF: those of their own
// _Py_DebugOffsets, the object layout moved past the larger header, the
// string kind bits (after a whole byte of interned from 3.14 on), and, from
// 3.14 on, where a frame's copy of the bytecode is.
func TestFreeThreadedOffsetsMatchGDB(t *testing.T) {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		testutil.SkipOrFail(t, "no gdb: %v", err)
	}
	for _, in := range testutil.FreeThreadedPythons(t) {
		t.Run(in.Name, func(t *testing.T) {
			py, err := Detect(openELF(t, in.Path))
			require.NoError(t, err)
			require.True(t, py.Offsets.FreeThreaded)
			require.False(t, py.Untested)
			require.Equal(t, fmt.Sprintf("3.%dt", in.Minor()), py.RuntimeVersion())
			o := py.Offsets
			fields := []gdbField{
				{"ThreadID", o.ThreadID, "&((PyThreadState*)0)->thread_id"},
				{"ThreadFrame", o.ThreadFrame, "&((PyThreadState*)0)->current_frame"},
				{"FramePrevious", o.FramePrevious, "&((_PyInterpreterFrame*)0)->previous"},
				{"FrameCode", o.FrameCode, "&((_PyInterpreterFrame*)0)->f_executable"},
				{"FrameInstruction", o.FrameInstruction, "&((_PyInterpreterFrame*)0)->instr_ptr"},
				{"CodeAdaptive", o.CodeAdaptive, "&((PyCodeObject*)0)->co_code_adaptive"},
				{"CodeQualname", o.CodeQualname, "&((PyCodeObject*)0)->co_qualname"},
				{"ObjectType", o.ObjectType, "&((PyObject*)0)->ob_type"},
				{"TypeName", o.TypeName, "&((PyTypeObject*)0)->tp_name"},
				{"VarObjectSize", o.VarObjectSize, "&((PyVarObject*)0)->ob_size"},
				{"BytesData", o.BytesData, "&((PyBytesObject*)0)->ob_sval"},
				{"UnicodeLength", o.UnicodeLength, "&((PyASCIIObject*)0)->length"},
				{"UnicodeState", o.UnicodeState, "&((PyASCIIObject*)0)->state"},
				{"UnicodeASCIIData", o.UnicodeASCIIData, "sizeof(PyASCIIObject)"},
				{"UnicodeCompactData", o.UnicodeCompactData, "sizeof(PyCompactUnicodeObject)"},
			}
			if in.Minor() >= 14 {
				fields = append(fields, []gdbField{
					{"FrameTLBCIndex", o.FrameTLBCIndex, "&((_PyInterpreterFrame*)0)->tlbc_index"},
					{"CodeTLBC", o.CodeTLBC, "&((PyCodeObject*)0)->co_tlbc"},
				}...)
			} else {
				require.Zero(t, o.CodeTLBC, "no thread-local bytecode before 3.14")
			}
			for _, c := range fields {
				got := gdbPrint(t, gdb, in.Path, []string{"(long)" + c.expr})
				require.Equal(t, uint64(c.got), got[0], "%s: gdb print %s", c.field, c.expr)
			}
			bits := stateBits(t, gdb, in.Path, o.UnicodeState)
			require.Equal(t, map[string]uint8{"kind": o.UnicodeKindShift, "compact": o.UnicodeCompactBit, "ascii": o.UnicodeASCIIBit}, bits)
		})
	}
}

// gdbField is an offset the detection gave and the gdb expression that
// prints it.
type gdbField struct {
	field string
	got   uint32
	expr  string
}

// A build with a field added to PyThreadState (a patched source) is read
// through its own _Py_DebugOffsets: the thread state's fields where that
// build has them, MovedFieldBytes past a release's (Debian sid's 3.14).
func TestMovedFieldOffsets(t *testing.T) {
	moved, err := Detect(openELF(t, testutil.MovedFieldPython(t).Path))
	require.NoError(t, err)
	release, err := Detect(openELF(t, testutil.SidPython(t, "3.14").Path))
	require.NoError(t, err)
	require.Equal(t, release.Offsets.ThreadID+testutil.MovedFieldBytes, moved.Offsets.ThreadID)
	require.Equal(t, release.Offsets.ThreadFrame+testutil.MovedFieldBytes, moved.Offsets.ThreadFrame)
	require.Equal(t, release.Offsets.ThreadNext, moved.Offsets.ThreadNext)
	require.Equal(t, release.Offsets.FrameCode, moved.Offsets.FrameCode)
}

// stateBit matches a bit field of `ptype /o`: "/* 49: 3 | 4 */ unsigned int compact : 1;".
var stateBit = regexp.MustCompile(`/\*\s+(\d+):\s*(\d+)\s+\|\s+\d+\s+\*/\s+unsigned int (kind|compact|ascii) :`)

// stateBits returns the bit of PyASCIIObject.state (at offset state) each
// of kind, compact and ascii starts at, from gdb's ptype /o.
func stateBits(t *testing.T, gdb, file string, state uint32) map[string]uint8 {
	out, err := testutil.RunWithin(exec.Command(gdb, "-batch", "-nx", "-ex", "ptype /o PyASCIIObject", file), testutil.Patient(2*time.Minute))
	require.NoError(t, err, "%s", out)
	bits := map[string]uint8{}
	for _, m := range stateBit.FindAllStringSubmatch(string(out), -1) {
		byteAt, _ := strconv.Atoi(m[1])
		bit, _ := strconv.Atoi(m[2])
		bits[m[3]] = uint8((byteAt-int(state))*8 + bit)
	}
	return bits
}
