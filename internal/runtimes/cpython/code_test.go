package cpython

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeMemory is a process memory of one region at base; it remembers the
// largest read asked of it.
type fakeMemory struct {
	base    uint64
	data    []byte
	maxRead int
}

func (m *fakeMemory) ReadAt(p []byte, off int64) (int, error) {
	m.maxRead = max(m.maxRead, len(p))
	at := uint64(off) - m.base
	if uint64(off) < m.base || at > uint64(len(m.data)) || uint64(len(p)) > uint64(len(m.data))-at {
		return 0, errors.New("unmapped")
	}
	return copy(p, m.data[at:]), nil
}

// Where fakeCode puts its objects, from base.
const (
	fakeBase      = 0x10000
	fakeType      = 0x200
	fakeTypeName  = 0x300
	fakeName      = 0x340
	fakeFile      = 0x400
	fakeQualName  = 0x480
	fakeLineTable = 0x500
	fakeCodeBytes = 0x580
	fakeSize      = 0x1000
)

// offsets313 are 3.13.0's offsets (what its _Py_DebugOffsets give, as gdb
// prints them: TestDetect).
var offsets313 = objectLayout(Offsets{
	Version:                 Version{3, 13, 0},
	RuntimeInterpretersHead: 632,  // pyruntimestate.interpreters.head
	InterpThreadsHead:       7344, // _is.threads.head
	ThreadNext:              8,    // _ts.next
	ThreadID:                152,  // _ts.thread_id
	ThreadFrame:             72,   // _ts.current_frame
	FramePrevious:           8,    // _PyInterpreterFrame.previous
	FrameCode:               0,    // _PyInterpreterFrame.f_executable
	FrameInstruction:        56,   // _PyInterpreterFrame.instr_ptr
	InstructionKind:         InstructionPointer,
	FrameOwner:              70, // _PyInterpreterFrame.owner
	EntryKind:               EntryShimFrame,
	CodeAdaptive:            200, // co_code_adaptive
	CodeFilename:            112, // co_filename
	CodeName:                120, // co_name
	CodeQualname:            128, // co_qualname
	CodeFirstLineNo:         68,  // co_firstlineno
	CodeLineTable:           136, // co_linetable
	CodeSize:                200, // up to co_code_adaptive
}, 40, 56)

// testOffsets returns the offsets of 3.<minor> (3.7 to 3.13).
func testOffsets(minor int) (Offsets, bool) {
	if minor == 13 {
		return offsets313, true
	}
	return offsetsFor(Version{3, minor, 0})
}

// fakeCode lays out a code object of version minor, named "fn" ("C.fn"), in
// file "文件.py", first line 7, with the line table table and 4 code units.
func fakeCode(minor int, table []byte) *fakeMemory {
	o, _ := testOffsets(minor)
	m := &fakeMemory{base: fakeBase, data: make([]byte, fakeSize)}
	ptr := func(at, to uint64) { binary.LittleEndian.PutUint64(m.data[at:], fakeBase+to) }
	u64 := func(at, v uint64) { binary.LittleEndian.PutUint64(m.data[at:], v) }
	str := func(at uint64, s string, kind int) {
		state := uint64(1<<o.UnicodeCompactBit | kind<<o.UnicodeKindShift)
		data := uint64(o.UnicodeCompactData)
		if kind == 1 && strings.IndexFunc(s, func(r rune) bool { return r > 127 }) < 0 {
			state |= 1 << o.UnicodeASCIIBit
			data = uint64(o.UnicodeASCIIData)
		}
		runes := []rune(s)
		u64(at+uint64(o.UnicodeLength), uint64(len(runes)))
		binary.LittleEndian.PutUint32(m.data[at+uint64(o.UnicodeState):], uint32(state))
		for i, r := range runes {
			p := m.data[at+data+uint64(i*kind):]
			switch kind {
			case 1:
				p[0] = byte(r)
			case 2:
				binary.LittleEndian.PutUint16(p, uint16(r))
			case 4:
				binary.LittleEndian.PutUint32(p, uint32(r))
			}
		}
	}
	ptr(uint64(o.ObjectType), fakeType)
	ptr(fakeType+uint64(o.TypeName), fakeTypeName)
	copy(m.data[fakeTypeName:], "code\x00")
	binary.LittleEndian.PutUint32(m.data[o.CodeFirstLineNo:], 7)
	ptr(uint64(o.CodeName), fakeName)
	str(fakeName, "fn", 1)
	ptr(uint64(o.CodeFilename), fakeFile)
	str(fakeFile, "文件.py", 2)
	if o.CodeQualname != 0 {
		ptr(uint64(o.CodeQualname), fakeQualName)
		str(fakeQualName, "C.fn", 1)
	}
	ptr(uint64(o.CodeLineTable), fakeLineTable)
	u64(fakeLineTable+uint64(o.VarObjectSize), uint64(len(table)))
	copy(m.data[fakeLineTable+uint64(o.BytesData):], table)
	if o.CodeCode != 0 {
		ptr(uint64(o.CodeCode), fakeCodeBytes)
		u64(fakeCodeBytes+uint64(o.VarObjectSize), 8) // bytes
	} else {
		u64(uint64(o.VarObjectSize), 4) // code units
	}
	return m
}

func TestReadCodeFake(t *testing.T) {
	for minor := 7; minor <= 13; minor++ {
		o, _ := testOffsets(minor)
		c, err := o.ReadCode(fakeCode(minor, []byte{0xe9, 0x04}), fakeBase)
		require.NoError(t, err)
		qualName := "fn"
		if minor >= 11 {
			qualName = "C.fn"
		}
		require.Equal(t, &Code{Name: "fn", QualName: qualName, File: "文件.py", FirstLine: 7, Instructions: 4,
			format: lineTableFormatOf(o.Version), lineTable: []byte{0xe9, 0x04}}, c, "3.%d", minor)
	}
}

func TestReadCodeRejects(t *testing.T) {
	o, _ := offsetsFor(Version{3, 12, 1})
	for _, tc := range []struct {
		name   string
		damage func(m []byte)
		want   string
	}{
		{"not a code object", func(m []byte) { copy(m[fakeTypeName:], "dict\x00") }, `not a code object (type "dict")`},
		{"type name without its NUL", func(m []byte) { copy(m[fakeTypeName:], "codec") }, `not a code object (type "codec")`},
		{"NULL type", func(m []byte) { clear(m[o.ObjectType : o.ObjectType+8]) }, "NULL pointer"},
		{"NULL name", func(m []byte) { clear(m[o.CodeName : o.CodeName+8]) }, "name: NULL pointer"},
		{"unmapped file name", func(m []byte) { m[o.CodeFilename+5] = 0x7f }, "file name: read 40 bytes at 0x7f0000010400: unmapped"},
		{"name not compact", func(m []byte) { m[fakeName+uint64(o.UnicodeState)] &^= 1 << o.UnicodeCompactBit }, "name: not a compact str"},
		{"name of kind 3", func(m []byte) { m[fakeName+uint64(o.UnicodeState)] |= 3 << o.UnicodeKindShift }, "name: not a compact str"},
		{"negative string length", func(m []byte) { m[fakeName+uint64(o.UnicodeLength)+7] = 0x80 }, "name: not a compact str"},
		{"negative first line", func(m []byte) { m[o.CodeFirstLineNo+3] = 0x80 }, "not a code object: first line"},
		{"negative line table length", func(m []byte) { m[fakeLineTable+uint64(o.VarObjectSize)+7] = 0x80 }, "line table: not a bytes object"},
		{"huge bytecode", func(m []byte) { m[o.VarObjectSize+4] = 1 }, "implausible length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fakeCode(12, nil)
			tc.damage(m.data)
			_, err := o.ReadCode(m, fakeBase)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := o.ReadCode(fakeCode(12, nil), 0)
	require.ErrorContains(t, err, "NULL pointer")
	_, err = o.ReadCode(fakeCode(12, nil), 1<<63)
	require.ErrorContains(t, err, "out of range")
	var zero Offsets
	_, err = zero.ReadCode(fakeCode(12, nil), fakeBase)
	require.ErrorContains(t, err, "offsets incomplete")
}

func TestReadCodeBoundsReads(t *testing.T) {
	o, _ := offsetsFor(Version{3, 11, 0})
	m := fakeCode(11, nil)
	m.data = append(m.data, make([]byte, 128<<10)...)
	// The name: an ASCII str of 2^40 characters, 'a' as far as mapped.
	const hugeName = fakeSize
	binary.LittleEndian.PutUint64(m.data[o.CodeName:], fakeBase+hugeName)
	copy(m.data[hugeName:], m.data[fakeName:fakeName+uint64(o.UnicodeASCIIData)])
	binary.LittleEndian.PutUint64(m.data[hugeName+uint64(o.UnicodeLength):], 1<<40)
	copy(m.data[hugeName+uint64(o.UnicodeASCIIData):], strings.Repeat("a", 4096))
	binary.LittleEndian.PutUint64(m.data[fakeLineTable+uint64(o.VarObjectSize):], 1<<40)
	c, err := o.ReadCode(m, fakeBase)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("a", maxStringBytes), c.Name)
	require.Len(t, c.lineTable, maxLineTableBytes)
	require.Equal(t, maxLineTableBytes, m.maxRead)
}

// FuzzReadCode: hostile memory never makes ReadCode or Line panic, loop or
// read more than the bounds.
func FuzzReadCode(f *testing.F) {
	for minor := 7; minor <= 13; minor++ {
		f.Add(uint8(minor), fakeCode(minor, []byte{0xe9, 0x04, 0, 1}).data[:0x600])
	}
	f.Fuzz(func(t *testing.T, minor uint8, data []byte) {
		o, ok := testOffsets(int(minor%7) + 7)
		require.True(t, ok)
		m := &fakeMemory{base: fakeBase, data: data}
		c, err := o.ReadCode(m, fakeBase)
		require.LessOrEqual(t, m.maxRead, maxLineTableBytes)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(c.Name), 3*maxStringBytes) // UTF-8 of at most 1 KiB of characters
		for i := range uint32(8) {
			c.Line(i)
		}
	})
}
