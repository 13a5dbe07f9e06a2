package cpython

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Bounds on what ReadCode reads: the process is not trusted.
const (
	maxStringBytes    = 1 << 10 // a name or file name is cut to this many bytes of characters
	maxLineTableBytes = 64 << 10
	maxCodeUnits      = 1 << 24 // more than any compiler emits (jumps are 32-bit at most)
	codeTypeName      = "code"
)

// Code is what symbolization needs of one code object.
type Code struct {
	Name, QualName, File string // QualName == Name before 3.11
	FirstLine            int
	Instructions         int // length of the bytecode, in code units

	format    lineTableFormat
	lineTable []byte // co_lnotab or co_linetable, at most maxLineTableBytes
}

// ErrNotCode means the address does not hold a code object.
var ErrNotCode = errors.New("not a code object")

// ReadCode reads the code object at addr from mem (the process's memory,
// such as /proc/PID/mem). Reads are bounded: names at most 1 KiB, the line
// table at most 64 KiB (cut beyond: later lines are unknown).
func (o *Offsets) ReadCode(mem io.ReaderAt, addr uint64) (*Code, error) {
	if !o.codeHeaderCovers() || o.UnicodeASCIIData < max(o.UnicodeState+4, o.UnicodeLength+8) || o.BytesData < o.VarObjectSize+8 {
		return nil, errors.New("read code object: offsets incomplete")
	}
	h, err := runtimes.ReadMem(mem, addr, int(o.CodeSize))
	if err != nil {
		return nil, fmt.Errorf("read code object at %#x: %w", addr, err)
	}
	if err := o.checkType(mem, h, codeTypeName); err != nil {
		return nil, fmt.Errorf("object at %#x: %w", addr, err)
	}
	c := &Code{format: lineTableFormatOf(o.Version)}
	c.FirstLine = int(int32(binary.LittleEndian.Uint32(h[o.CodeFirstLineNo:])))
	if c.FirstLine < 0 {
		return nil, fmt.Errorf("code object at %#x: %w: first line %d", addr, ErrNotCode, c.FirstLine)
	}
	pointer := func(at uint32) uint64 { return binary.LittleEndian.Uint64(h[at:]) }
	if c.Name, err = o.readString(mem, pointer(o.CodeName)); err != nil {
		return nil, fmt.Errorf("code object at %#x: name: %w", addr, err)
	}
	if c.File, err = o.readString(mem, pointer(o.CodeFilename)); err != nil {
		return nil, fmt.Errorf("code object at %#x: file name: %w", addr, err)
	}
	c.QualName = c.Name
	if o.CodeQualname != 0 {
		if c.QualName, err = o.readString(mem, pointer(o.CodeQualname)); err != nil {
			return nil, fmt.Errorf("code object at %#x: qualified name: %w", addr, err)
		}
	}
	if c.lineTable, err = o.readBytes(mem, pointer(o.CodeLineTable), maxLineTableBytes); err != nil {
		return nil, fmt.Errorf("code object at %#x: line table: %w", addr, err)
	}
	units, err := o.codeUnits(mem, h)
	if err != nil {
		return nil, fmt.Errorf("code object at %#x: bytecode: %w", addr, err)
	}
	c.Instructions = units
	return c, nil
}

// codeUnits returns the length of the bytecode in code units: the code
// object's own ob_size from 3.11, co_code's length before.
func (o *Offsets) codeUnits(mem io.ReaderAt, h []byte) (int, error) {
	var n int64
	if o.CodeCode == 0 {
		n = int64(binary.LittleEndian.Uint64(h[o.VarObjectSize:]))
	} else {
		b, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(h[o.CodeCode:]), int(o.VarObjectSize)+8)
		if err != nil {
			return 0, err
		}
		n = int64(binary.LittleEndian.Uint64(b[o.VarObjectSize:])) / 2
	}
	if n < 0 || n > maxCodeUnits {
		return 0, fmt.Errorf("%w: implausible length %d", ErrNotCode, n)
	}
	return int(n), nil
}

// checkType checks that the object whose header is h has the type named
// want (PyTypeObject.tp_name).
func (o *Offsets) checkType(mem io.ReaderAt, h []byte, want string) error {
	typ, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(h[o.ObjectType:]), int(o.TypeName)+8)
	if err != nil {
		return fmt.Errorf("read type: %w", err)
	}
	name, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(typ[o.TypeName:]), len(want)+1)
	if err != nil {
		return fmt.Errorf("read type name: %w", err)
	}
	if string(name) != want+"\x00" {
		got, _, _ := strings.Cut(string(name), "\x00")
		return fmt.Errorf("%w (type %q)", ErrNotCode, got)
	}
	return nil
}

// readString reads the compact str object at addr, its characters cut to
// maxStringBytes bytes.
func (o *Offsets) readString(mem io.ReaderAt, addr uint64) (string, error) {
	h, err := runtimes.ReadMem(mem, addr, int(o.UnicodeASCIIData))
	if err != nil {
		return "", err
	}
	length := int64(binary.LittleEndian.Uint64(h[o.UnicodeLength:]))
	state := binary.LittleEndian.Uint32(h[o.UnicodeState:])
	kind := int(state >> o.UnicodeKindShift & 7)
	if state>>o.UnicodeCompactBit&1 == 0 || (kind != 1 && kind != 2 && kind != 4) || length < 0 {
		return "", fmt.Errorf("not a compact str (state %#x, length %d)", state, length)
	}
	data := uint64(o.UnicodeCompactData)
	if ascii := state>>o.UnicodeASCIIBit&1 != 0; ascii {
		if kind != 1 {
			return "", fmt.Errorf("not a compact str (state %#x)", state)
		}
		data = uint64(o.UnicodeASCIIData)
	}
	n := min(length, int64(maxStringBytes/kind))
	b, err := runtimes.ReadMem(mem, addr+data, int(n)*kind)
	if err != nil {
		return "", err
	}
	if data == uint64(o.UnicodeASCIIData) {
		return strings.ToValidUTF8(string(b), "\uFFFD"), nil
	}
	var s strings.Builder
	for i := 0; i < len(b); i += kind {
		var r rune
		switch kind {
		case 1:
			r = rune(b[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(b[i:]))
		case 4:
			r = rune(binary.LittleEndian.Uint32(b[i:]))
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		s.WriteRune(r)
	}
	return s.String(), nil
}

// readBytes reads the bytes object at addr, cut to max bytes.
func (o *Offsets) readBytes(mem io.ReaderAt, addr uint64, max int) ([]byte, error) {
	h, err := runtimes.ReadMem(mem, addr, int(o.BytesData))
	if err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint64(h[o.VarObjectSize:]))
	if n < 0 {
		return nil, fmt.Errorf("not a bytes object (length %d)", n)
	}
	return runtimes.ReadMem(mem, addr+uint64(o.BytesData), int(min(n, int64(max))))
}
