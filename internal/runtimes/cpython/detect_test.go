package cpython

import (
	"debug/elf"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

const pyenv = "/root/.pyenv/versions/"

// Interpreters on the development machine: pyenv release builds with DWARF
// and Debian's stripped executable.
var interpreterFiles = []struct {
	path    string
	version Version
	minor   int // column of offsetMatrix
}{
	{pyenv + "3.7.16/lib/libpython3.7m.so.1.0", Version{3, 7, 16}, 7},
	{pyenv + "3.8.18/lib/libpython3.8.so.1.0", Version{3, 8, 18}, 8},
	{pyenv + "3.9.18/lib/libpython3.9.so.1.0", Version{3, 9, 18}, 9},
	{pyenv + "3.10.13/lib/libpython3.10.so.1.0", Version{3, 10, 13}, 10},
	{pyenv + "3.11.7/lib/libpython3.11.so.1.0", Version{3, 11, 7}, 11},
	{pyenv + "3.12.1/lib/libpython3.12.so.1.0", Version{3, 12, 1}, 12},
	{pyenv + "3.13.0/lib/libpython3.13.so.1.0", Version{3, 13, 0}, 13},
	{"/usr/bin/python3.11", Version{3, 11, 2}, 11},
}

// offsetMatrix is what gdb printed for each Offsets field on the pyenv
// builds of 3.7 to 3.13 (columns), with the gdb
// expression of each ("" where gdb has nothing to say: the field is unused
// or not a struct offset).
var offsetMatrix = []struct {
	field string
	gdb   [7]string
	want  [7]uint64
}{
	{"RuntimeInterpretersHead", all("&((_PyRuntimeState*)0)->interpreters.head"), [7]uint64{24, 32, 32, 32, 40, 40, 632}},
	{"InterpThreadsHead", [7]string{tstateHead, tstateHead, tstateHead, tstateHead, threadsHead, threadsHead, threadsHead}, [7]uint64{8, 8, 8, 8, 16, 72, 7344}},
	{"ThreadNext", all("&((PyThreadState*)0)->next"), [7]uint64{8, 8, 8, 8, 8, 8, 8}},
	{"ThreadID", all("&((PyThreadState*)0)->thread_id"), [7]uint64{176, 176, 176, 176, 152, 136, 152}},
	{"ThreadFrame", [7]string{tsFrame, tsFrame, tsFrame, tsFrame, tsCFrame, tsCFrame, "&((PyThreadState*)0)->current_frame"}, [7]uint64{24, 24, 24, 24, 56, 56, 72}},
	{"CFrameCurrentFrame", [7]string{"", "", "", "", cframeCurrent, cframeCurrent, ""}, [7]uint64{0, 0, 0, 0, 8, 0, 0}},
	{"ThreadFrameViaCFrame", [7]string{}, [7]uint64{0, 0, 0, 0, 1, 1, 0}},
	{"FramePrevious", [7]string{fBack, fBack, fBack, fBack, iframe("previous"), iframe("previous"), iframe("previous")}, [7]uint64{24, 24, 24, 24, 48, 8, 8}},
	{"FrameCode", [7]string{fCode, fCode, fCode, fCode, iframe("f_code"), iframe("f_code"), iframe("f_executable")}, [7]uint64{32, 32, 32, 32, 32, 0, 0}},
	{"FrameInstruction", [7]string{fLasti, fLasti, fLasti, fLasti, iframe("prev_instr"), iframe("prev_instr"), iframe("instr_ptr")}, [7]uint64{104, 104, 104, 96, 56, 56, 56}},
	{"InstructionKind", [7]string{}, [7]uint64{0, 0, 0, 1, 2, 2, 2}},
	{"FrameOwner", [7]string{"", "", "", "", iframe("is_entry"), iframe("owner"), iframe("owner")}, [7]uint64{0, 0, 0, 0, 68, 70, 70}},
	{"EntryKind", [7]string{}, [7]uint64{0, 0, 0, 0, 1, 2, 2}},
	{"CodeAdaptive", [7]string{"", "", "", "", codeAdaptive, codeAdaptive, codeAdaptive}, [7]uint64{0, 0, 0, 0, 184, 192, 200}},
	{"CodeFilename", all(code("co_filename")), [7]uint64{96, 104, 104, 104, 112, 112, 112}},
	{"CodeName", all(code("co_name")), [7]uint64{104, 112, 112, 112, 120, 120, 120}},
	{"CodeQualname", [7]string{"", "", "", "", code("co_qualname"), code("co_qualname"), code("co_qualname")}, [7]uint64{0, 0, 0, 0, 128, 128, 128}},
	{"CodeFirstLineNo", all(code("co_firstlineno")), [7]uint64{36, 40, 40, 40, 72, 68, 68}},
	{"CodeLineTable", [7]string{code("co_lnotab"), code("co_lnotab"), code("co_lnotab"), code("co_linetable"), code("co_linetable"), code("co_linetable"), code("co_linetable")}, [7]uint64{112, 120, 120, 120, 136, 136, 136}},
	{"CodeCode", [7]string{code("co_code"), code("co_code"), code("co_code"), code("co_code"), "", "", ""}, [7]uint64{40, 48, 48, 48, 0, 0, 0}},
	{"CodeSize", [7]string{"sizeof(PyCodeObject)", "sizeof(PyCodeObject)", "sizeof(PyCodeObject)", "sizeof(PyCodeObject)", codeAdaptive, codeAdaptive, codeAdaptive}, [7]uint64{144, 176, 176, 176, 184, 192, 200}},
	{"ObjectType", all("&((PyObject*)0)->ob_type"), [7]uint64{8, 8, 8, 8, 8, 8, 8}},
	{"TypeName", all("&((PyTypeObject*)0)->tp_name"), [7]uint64{24, 24, 24, 24, 24, 24, 24}},
	{"VarObjectSize", all("&((PyVarObject*)0)->ob_size"), [7]uint64{16, 16, 16, 16, 16, 16, 16}},
	{"BytesData", all("&((PyBytesObject*)0)->ob_sval"), [7]uint64{32, 32, 32, 32, 32, 32, 32}},
	{"UnicodeLength", all("&((PyASCIIObject*)0)->length"), [7]uint64{16, 16, 16, 16, 16, 16, 16}},
	{"UnicodeState", all("&((PyASCIIObject*)0)->state"), [7]uint64{32, 32, 32, 32, 32, 32, 32}},
	{"UnicodeASCIIData", all("sizeof(PyASCIIObject)"), [7]uint64{48, 48, 48, 48, 48, 40, 40}},
	{"UnicodeCompactData", all("sizeof(PyCompactUnicodeObject)"), [7]uint64{72, 72, 72, 72, 72, 56, 56}},
	{"UnicodeKindShift", [7]string{}, [7]uint64{2, 2, 2, 2, 2, 2, 2}},
	{"UnicodeCompactBit", [7]string{}, [7]uint64{5, 5, 5, 5, 5, 5, 5}},
	{"UnicodeASCIIBit", [7]string{}, [7]uint64{6, 6, 6, 6, 6, 6, 6}},
}

const (
	tstateHead    = "&((PyInterpreterState*)0)->tstate_head"
	threadsHead   = "&((PyInterpreterState*)0)->threads.head"
	tsFrame       = "&((PyThreadState*)0)->frame"
	tsCFrame      = "&((PyThreadState*)0)->cframe"
	cframeCurrent = "&((_PyCFrame*)0)->current_frame"
	fBack         = "&((PyFrameObject*)0)->f_back"
	fCode         = "&((PyFrameObject*)0)->f_code"
	fLasti        = "&((PyFrameObject*)0)->f_lasti"
	codeAdaptive  = "&((PyCodeObject*)0)->co_code_adaptive"
)

func all(expr string) [7]string  { return [7]string{expr, expr, expr, expr, expr, expr, expr} }
func code(field string) string   { return "&((PyCodeObject*)0)->" + field }
func iframe(field string) string { return "&((_PyInterpreterFrame*)0)->" + field }
func column(minor int) int       { return minor - 7 }
func fieldValue(o Offsets, f string) uint64 {
	v := reflect.ValueOf(o).FieldByName(f)
	if v.Kind() == reflect.Bool {
		if v.Bool() {
			return 1
		}
		return 0
	}
	return v.Uint()
}

func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		testutil.SkipOrFail(t, "no %s on this machine", path)
	}
	f, err := elf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestDetect(t *testing.T) {
	for _, tc := range interpreterFiles {
		t.Run(tc.path, func(t *testing.T) {
			f := openELF(t, tc.path)
			py, err := Detect(f)
			require.NoError(t, err)
			require.Equal(t, tc.version, py.Version)
			require.Equal(t, tc.version, py.Offsets.Version)

			syms, err := f.DynamicSymbols()
			require.NoError(t, err)
			i := slices.IndexFunc(syms, func(s elf.Symbol) bool { return s.Name == "_PyRuntime" })
			require.GreaterOrEqual(t, i, 0)
			require.Equal(t, syms[i].Value, py.RuntimeAddr)

			for _, row := range offsetMatrix {
				require.Equal(t, row.want[column(tc.minor)], fieldValue(py.Offsets, row.field), row.field)
			}
		})
	}
}

func TestDetectRejects(t *testing.T) {
	for _, tc := range []struct {
		path string
		want error
		msg  string
	}{
		{"/bin/ls", ErrNotPython, ""},
		{pyenv + "2.7.18/lib/libpython2.7.so.1.0", ErrNotPython, ""},
		{pyenv + "3.6.15/lib/libpython3.6m.so.1.0", ErrNotPython, ""}, // no _PyRuntime before 3.7
		{pyenv + "3.9.18/bin/python3.9", ErrNotPython, ""},            // _PyRuntime is in libpython
	} {
		t.Run(tc.path, func(t *testing.T) {
			_, err := Detect(openELF(t, tc.path))
			require.ErrorIs(t, err, tc.want)
			if tc.msg != "" {
				require.ErrorContains(t, err, tc.msg)
			}
		})
	}
}

// The _Py_DebugOffsets of 3.13.0 give the offsets gdb prints (TestDetect),
// Debian sid's 3.14 and 3.15 the ones their headers' layouts say, and a
// damaged block is refused, naming what is wrong.
func TestDebugOffsets(t *testing.T) {
	type want struct{ threadID, frameCode, codeAdaptive uint32 }
	files := map[string]want{pyenv + "3.13.0/lib/libpython3.13.so.1.0": {152, 0, 200}}
	for _, v := range testutil.SidPythonVersions {
		// Read from the running interpreter: PyThreadState.thread_id and
		// the code object's bytecode (co_code_adaptive) through ctypes
		// would need the headers; the walk's tests check the rest.
		files[testutil.SidPython(t, v).Path] = want{}
	}
	for path, w := range files {
		t.Run(path, func(t *testing.T) {
			f := openELF(t, path)
			py, err := Detect(f)
			require.NoError(t, err)
			require.False(t, py.Untested)
			if w != (want{}) {
				require.Equal(t, w, want{py.Offsets.ThreadID, py.Offsets.FrameCode, py.Offsets.CodeAdaptive})
			}
			runtime := definedSymbols(f, symRuntime)[symRuntime]
			b, err := readFileData(f, runtime.Value, debugBlockSize(py.Version.Minor))
			require.NoError(t, err)
			pos, _ := debugPositions(py.Version.Minor)
			for name, damage := range map[string]func(b []byte){
				"cookie":             func(b []byte) { b[0] = 'y' },
				"version":            func(b []byte) { b[debugVersionAt+2] = 12 },
				"free-threaded flag": func(b []byte) { b[debugFreeThreadedAt] = 1 }, // a default build's objects
				"runtime size":       func(b []byte) { b[pos["runtime_state.size"]] ^= 8 },
				"misaligned":         func(b []byte) { b[pos["interpreter_frame.previous"]] |= 4 },
				"past struct":        func(b []byte) { copy(b[pos["thread_state.thread_id"]:], b[pos["thread_state.size"]:][:8]) },
				"huge struct":        func(b []byte) { b[pos["code_object.size"]+6] = 1 },
				"object ABI":         func(b []byte) { b[pos["pyobject.ob_type"]] = 16 },
				"cut short":          nil,
			} {
				c := append([]byte(nil), b...)
				if damage == nil {
					c = c[:len(c)-8]
				} else {
					damage(c)
				}
				_, err := offsetsFromDebug(py.Version, c, runtime.Size)
				require.ErrorIs(t, err, ErrUnsupported, name)
				t.Logf("%s: %v", name, err)
			}
		})
	}
}

// A version newer than the newest known layout is read with that layout
// and marked untested when its block is consistent; refused when the
// layout misplaces what is read.
func TestDebugOffsetsOfANewerVersion(t *testing.T) {
	f := openELF(t, testutil.SidPython(t, "3.15").Path)
	runtime := definedSymbols(f, symRuntime)[symRuntime]
	b, err := readFileData(f, runtime.Value, debugBlockSize(15))
	require.NoError(t, err)
	want, err := offsetsFromDebug(Version{3, 15, 2}, b, runtime.Size)
	require.NoError(t, err)

	next := append([]byte(nil), b...)
	next[debugVersionAt+2] = 16 // 3.16, laid out as 3.15
	got, err := offsetsFromDebug(Version{3, 16, 0}, next, runtime.Size)
	require.NoError(t, err)
	want.Version = Version{3, 16, 0}
	require.Equal(t, want, got)
	_, tested := debugLayoutOf(16)
	require.False(t, tested)

	// 3.16 with a field inserted before thread_state's: every later
	// value one field later.
	pos, n := debugPositions(15)
	at := pos["thread_state.size"]
	moved := append(append(append([]byte(nil), next[:at]...), make([]byte, 8)...), next[at:n-8]...)
	_, err = offsetsFromDebug(Version{3, 16, 0}, moved, runtime.Size)
	require.ErrorIs(t, err, ErrUnsupported)
	t.Log(err)
}

func TestOffsetTableCoversCodeHeader(t *testing.T) {
	for minor := range offsetsByMinor {
		o, _ := testOffsets(minor)
		require.True(t, o.codeHeaderCovers(), "3.%d", minor)
	}
}

// TestOffsetsMatchGDB asks gdb, from the DWARF of the pyenv builds, for every
// offset of the table: the oracle the table was written from.
func TestOffsetsMatchGDB(t *testing.T) {
	for _, tc := range interpreterFiles {
		if !strings.HasPrefix(tc.path, pyenv) {
			continue // no DWARF
		}
		t.Run(tc.path, func(t *testing.T) {
			openELF(t, tc.path)
			gdb, err := exec.LookPath("gdb")
			if err != nil {
				testutil.SkipOrFail(t, "no gdb: %v", err)
			}
			var fields, exprs []string
			want := map[string]uint64{}
			for _, row := range offsetMatrix {
				if e := row.gdb[column(tc.minor)]; e != "" {
					fields = append(fields, row.field)
					exprs = append(exprs, "(long)"+e)
					want[row.field] = row.want[column(tc.minor)]
				}
			}
			if tc.minor >= 12 {
				fields = append(fields, "FrameOwnedByCStack")
				exprs = append(exprs, "(int)FRAME_OWNED_BY_CSTACK")
				want["FrameOwnedByCStack"] = FrameOwnedByCStack
			}
			got := gdbPrint(t, gdb, tc.path, exprs)
			for i, f := range fields {
				require.Equal(t, want[f], got[i], "%s: gdb print %s", f, exprs[i])
			}
		})
	}
}

var gdbValue = regexp.MustCompile(`(?m)^\$(\d+) = (-?\d+)$`)

// gdbPrint has gdb print each expression on file and returns the values.
func gdbPrint(t *testing.T, gdb, file string, exprs []string) []uint64 {
	args := []string{"-batch", "-nx"}
	for _, e := range exprs {
		args = append(args, "-ex", "print "+e)
	}
	out, err := testutil.RunWithin(exec.Command(gdb, append(args, file)...), testutil.Patient(2*time.Minute))
	require.NoError(t, err, "%s", out)
	values := make([]uint64, len(exprs))
	matches := gdbValue.FindAllStringSubmatch(string(out), -1)
	require.Len(t, matches, len(exprs), "gdb output:\n%s", out)
	for i, m := range matches {
		require.Equal(t, strconv.Itoa(i+1), m[1], "gdb output:\n%s", out)
		values[i], err = strconv.ParseUint(m[2], 10, 64)
		require.NoError(t, err)
	}
	return values
}

func TestVersionString(t *testing.T) {
	require.Equal(t, "3.12.1", Version{3, 12, 1}.String())
}

// Debian's arm64 CPython is detected with the offsets of its version (the
// kernel matrix's arm64 guests walk it).
func TestDetectARM64(t *testing.T) {
	root := testutil.DebianPackage(t, "arm64", "libpython3.11")
	f, err := elf.Open(root + "/usr/lib/aarch64-linux-gnu/libpython3.11.so.1.0")
	require.NoError(t, err)
	defer f.Close()
	py, err := Detect(f)
	require.NoError(t, err)
	require.Equal(t, 3, py.Version.Major)
	require.Equal(t, 11, py.Version.Minor)
	want, ok := offsetsFor(py.Version)
	require.True(t, ok)
	require.Equal(t, want, py.Offsets)
	require.NotZero(t, py.RuntimeAddr)
}

func TestFindVersion(t *testing.T) {
	acceptAll := func(Version) bool { return true }
	for _, tc := range []struct {
		name   string
		data   string
		accept func(Version) bool
		want   Version
		ok     bool
	}{
		{"alone", "\x003.9.18\x00", acceptAll, Version{3, 9, 18}, true},
		{"at the start", "3.10.13\x00", acceptAll, Version{3, 10, 13}, true},
		{"tail of a prefix", "/root/.pyenv/versions/3.9.18\x00", acceptAll, Version{3, 9, 18}, true},
		{"release candidate", "\x003.10.0rc2\x00", acceptAll, Version{3, 10, 0}, true},
		{"alpha", "\x003.8.0a4\x00", acceptAll, Version{3, 8, 0}, true},
		{"development", "\x003.9.2+\x00", acceptAll, Version{3, 9, 2}, true},
		{"not NUL-terminated", "\x003.9.18 (main)\x00", acceptAll, Version{}, false},
		{"inside a number", "\x0013.9.18\x00", acceptAll, Version{}, false},
		{"after a dot", "\x001.3.9.18\x00", acceptAll, Version{}, false},
		{"three-digit minor", "\x003.123.1\x00", acceptAll, Version{}, false},
		{"four-digit patch", "\x003.9.1234\x00", acceptAll, Version{}, false},
		{"no patch", "\x003.9\x00", acceptAll, Version{}, false},
		{"cut short", "\x003.9.", acceptAll, Version{}, false},
		{"empty", "", acceptAll, Version{}, false},
		{"the first accepted", "\x003.8.1\x00\x003.9.7\x00", func(v Version) bool { return v.Minor == 9 }, Version{3, 9, 7}, true},
		{"none accepted", "\x003.8.1\x00", func(v Version) bool { return v.Minor == 9 }, Version{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := findVersion([]byte(tc.data), tc.accept)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, v)
		})
	}
}
