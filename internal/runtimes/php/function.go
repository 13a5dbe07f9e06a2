package php

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Bounds on what ReadFunction and the naming read: the process is not
// trusted.
const (
	maxStringBytes = 1 << 10 // a name or file name is cut to this many bytes
	maxOps         = 1 << 24 // more ops than any op_array has: the function is not one
	maxLines       = 1 << 12 // lines cached per function
)

// ErrNotFunction means an address does not hold a zend_function.
var ErrNotFunction = errors.New("not a zend_function")

// Function is what naming needs of one zend_function.
type Function struct {
	// Name is "Class::method", "function", or "{main}" for a file's (or
	// an eval's) top code.
	Name string
	// File is the op_array's file name, "" for an internal function.
	File string
	// Internal says it is a C function: no file, no lines.
	Internal bool
	// LineStart is the op_array's first line.
	LineStart int64

	opcodes uint64
	last    uint32
	// cookie is what was read of the function that must be unchanged for
	// it to be the same function: its type, name, scope and, for user
	// code, file name, ops and lines.
	cookie [6]uint64
	// lines are the lines of the ops read, by position.
	lines map[uint32]int64
}

// ReadFunction reads the zend_function at addr from mem (the process's
// memory, such as /proc/PID/mem). Reads are bounded: one zend_function,
// names cut to 1 KiB.
func (l *Layout) ReadFunction(mem io.ReaderAt, addr uint64) (*Function, error) {
	if !l.covers() {
		return nil, errors.New("read zend_function: layout incomplete")
	}
	h, err := runtimes.ReadMem(mem, addr, int(l.FunctionSize))
	if err != nil {
		return nil, fmt.Errorf("read zend_function at %#x: %w", addr, err)
	}
	f := &Function{cookie: l.cookieOf(h)}
	typ := h[l.FunctionType]
	pointer := func(at uint32) uint64 { return binary.LittleEndian.Uint64(h[at:]) }
	switch typ {
	case internalFunction:
		f.Internal = true
	case userFunction, evalCode:
		f.LineStart = int64(binary.LittleEndian.Uint32(h[l.OpArrayLineStart:]))
		lineEnd := int64(binary.LittleEndian.Uint32(h[l.OpArrayLineEnd:]))
		f.last = binary.LittleEndian.Uint32(h[l.OpArrayLast:])
		f.opcodes = pointer(l.OpArrayOpcodes)
		if f.LineStart > lineEnd || f.last == 0 || f.last > maxOps || f.opcodes == 0 {
			return nil, fmt.Errorf("%w at %#x: lines %d-%d, %d ops at %#x", ErrNotFunction, addr, f.LineStart, lineEnd, f.last, f.opcodes)
		}
		if f.File, err = l.readString(mem, pointer(l.OpArrayFilename)); err != nil {
			return nil, fmt.Errorf("zend_function at %#x: file name: %w", addr, err)
		}
	default:
		return nil, fmt.Errorf("%w at %#x: type %d", ErrNotFunction, addr, typ)
	}
	name := pointer(l.FunctionName)
	if name == 0 {
		if f.Internal {
			return nil, fmt.Errorf("%w at %#x: an internal function without a name", ErrNotFunction, addr)
		}
		f.Name = "{main}"
		return f, nil
	}
	if f.Name, err = l.readString(mem, name); err != nil {
		return nil, fmt.Errorf("zend_function at %#x: name: %w", addr, err)
	}
	if scope := pointer(l.FunctionScope); scope != 0 {
		c, err := runtimes.ReadMem(mem, scope+uint64(l.ClassName), 8)
		if err != nil {
			return nil, fmt.Errorf("zend_function at %#x: class: %w", addr, err)
		}
		class, err := l.readString(mem, binary.LittleEndian.Uint64(c))
		if err != nil {
			return nil, fmt.Errorf("zend_function at %#x: class name: %w", addr, err)
		}
		f.Name = class + "::" + f.Name
	}
	return f, nil
}

// cookieOf is the cookie of the zend_function whose bytes are h.
func (l *Layout) cookieOf(h []byte) [6]uint64 {
	u64 := func(at uint32) uint64 { return binary.LittleEndian.Uint64(h[at:]) }
	c := [6]uint64{uint64(h[l.FunctionType]), u64(l.FunctionName), u64(l.FunctionScope)}
	if h[l.FunctionType] != internalFunction {
		c[3] = u64(l.OpArrayFilename)
		c[4] = u64(l.OpArrayOpcodes)
		c[5] = uint64(binary.LittleEndian.Uint32(h[l.OpArrayLast:]))<<32 | uint64(binary.LittleEndian.Uint32(h[l.OpArrayLineStart:]))
	}
	return c
}

// Line is the line of the op at position, reading it from mem unless read
// before; 0 when the function has no lines or position is not one of its
// ops.
func (f *Function) Line(l *Layout, mem io.ReaderAt, position uint32) (int64, error) {
	if f.Internal || position >= f.last {
		return 0, nil
	}
	if line, ok := f.lines[position]; ok {
		return line, nil
	}
	b, err := runtimes.ReadMem(mem, f.opcodes+uint64(position)*uint64(l.OpSize)+uint64(l.OpLineno), 4)
	if err != nil {
		return 0, fmt.Errorf("read op %d: %w", position, err)
	}
	line := int64(binary.LittleEndian.Uint32(b))
	if len(f.lines) >= maxLines || f.lines == nil {
		f.lines = make(map[uint32]int64)
	}
	f.lines[position] = line
	return line, nil
}

// cachedLine is Line from the lines read before only.
func (f *Function) cachedLine(position uint32) (int64, bool) {
	if f.Internal || position >= f.last {
		return 0, true
	}
	line, ok := f.lines[position]
	return line, ok
}

// readString reads the zend_string at addr, its characters cut to
// maxStringBytes bytes.
func (l *Layout) readString(mem io.ReaderAt, addr uint64) (string, error) {
	h, err := runtimes.ReadMem(mem, addr, int(l.StringVal))
	if err != nil {
		return "", err
	}
	n := binary.LittleEndian.Uint64(h[l.StringLen:])
	if n > math.MaxInt32 {
		return "", fmt.Errorf("not a zend_string (length %d)", n)
	}
	b, err := runtimes.ReadMem(mem, addr+uint64(l.StringVal), int(min(n, maxStringBytes)))
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// maxFunctions bounds the functions cached per process; recheck is how
// long a cached one is used before its cookie is read again (a freed
// function's memory may hold another one later: opcache off, each request
// compiles its functions anew).
const (
	maxFunctions = 4096
	recheck      = 10 * time.Second
)

// process is what is cached about the engine of one process.
type process struct {
	layout    *Layout
	mem       io.ReaderAt
	functions map[uint64]cachedFunction
	files     map[uint64]cachedFile
}

// cachedFile is the file name of top code read at an address, and when.
type cachedFile struct {
	name string
	read time.Time
}

// cachedFunction is a function read, and when its cookie was last seen
// unchanged.
type cachedFunction struct {
	function *Function
	checked  time.Time
}

// Cached names the PHP frame of the zend_function at fn, at position (an
// op index, or NoPosition), from the function read within recheck and the
// op's line read before.
func (p *process) Cached(fn uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	if fn&wordCode != 0 {
		file, ok := p.files[fn&^wordCode]
		if !ok || now.Sub(file.read) >= recheck {
			return runtimes.Frame{}, false
		}
		return codeFrame(file.name, position), true
	}
	cached, ok := p.functions[fn]
	if !ok || now.Sub(cached.checked) >= recheck {
		return runtimes.Frame{}, false
	}
	line, ok := cached.function.cachedLine(position)
	if !ok {
		return runtimes.Frame{}, false
	}
	return frameOf(cached.function, line), true
}

// Read names the PHP frame of the zend_function at fn, at position: the
// cached function while its cookie is unchanged, else the one read now.
func (p *process) Read(fn uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	if fn&wordCode != 0 {
		return p.readCode(fn&^wordCode, position, now)
	}
	cached, ok := p.functions[fn]
	f := cached.function
	if !ok || now.Sub(cached.checked) >= recheck && !p.unchanged(fn, f) {
		var err error
		if f, err = p.layout.ReadFunction(p.mem, fn); err != nil {
			delete(p.functions, fn)
			return runtimes.Frame{}, err
		}
	}
	if len(p.functions) >= maxFunctions || p.functions == nil {
		p.functions = make(map[uint64]cachedFunction)
	}
	p.functions[fn] = cachedFunction{function: f, checked: now}
	line, err := f.Line(p.layout, p.mem, position)
	if err != nil {
		return runtimes.Frame{}, fmt.Errorf("zend_function at %#x: %w", fn, err)
	}
	return frameOf(f, line), nil
}

// readCode names the frame of top code whose file name is the zend_string
// at addr, at line (wordPositionNone: none).
func (p *process) readCode(addr uint64, line uint32, now time.Time) (runtimes.Frame, error) {
	name, err := p.layout.readString(p.mem, addr)
	if err != nil {
		delete(p.files, addr)
		return runtimes.Frame{}, fmt.Errorf("top code's file name at %#x: %w", addr, err)
	}
	if len(p.files) >= maxFunctions || p.files == nil {
		p.files = make(map[uint64]cachedFile)
	}
	p.files[addr] = cachedFile{name: name, read: now}
	return codeFrame(name, line), nil
}

// codeFrame is the frame of top code in file at line (wordPositionNone or
// more: none).
func codeFrame(file string, line uint32) runtimes.Frame {
	f := runtimes.Frame{Function: "{main}", File: file}
	if line < wordPositionNone {
		f.Line = int64(line)
	}
	return f
}

// unchanged says whether the zend_function at addr still has f's cookie.
func (p *process) unchanged(addr uint64, f *Function) bool {
	h, err := runtimes.ReadMem(p.mem, addr, int(p.layout.FunctionSize))
	return err == nil && p.layout.cookieOf(h) == f.cookie
}

// frameOf is the frame of f at line.
func frameOf(f *Function, line int64) runtimes.Frame {
	return runtimes.Frame{Function: f.Name, File: f.File, Line: line}
}
