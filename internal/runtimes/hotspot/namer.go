package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Namer names the code of one JVM process at an address of its code cache:
// a compiled Java method (nmethod) as its class and method, any other blob
// (the interpreter, stubs, adapters) by its name. It reads the process's
// tables once they are published, and its code cache again when an address
// falls outside the heaps it knows. Not safe for concurrent use.
type Namer struct {
	mem  io.ReaderAt
	addr func(symbol string) (uint64, bool)

	layout    *Layout
	debug     *DebugLayout // nil: no lines or inlined frames for this build
	debugs    DebugCache
	lines     LineCache
	cache     *CodeCache
	err       error     // why there is no layout yet
	retryAt   time.Time // when to read the tables or code cache again
	methods   map[uint64]Method
	blobNames map[uint64]string // by the address of the name
}

// retryInterval spaces the reads of a JVM's tables that is still starting,
// and of its code cache when an address is outside it.
const retryInterval = time.Second

// maxNamerMethods bounds the methods cached per process.
const maxNamerMethods = 1 << 14

// NewNamer names the code of the JVM whose memory is mem; addr gives the
// run-time addresses of Symbols.
func NewNamer(mem io.ReaderAt, addr func(symbol string) (uint64, bool)) *Namer {
	return &Namer{mem: mem, addr: addr, methods: map[uint64]Method{}, blobNames: map[uint64]string{}}
}

// Code is what was found at an address.
type Code struct {
	Blob   string // the blob's name: "nmethod", "Interpreter", ...
	Method Method // for a compiled method ("nmethod", "native nmethod")
	// Frames are the Java frames a compiled method runs at the address,
	// the innermost (inlined) first, the method's own last; nil when its
	// debug information could not be read.
	Frames []JavaFrame
}

// JavaFrame is a method at a source line (0: unknown).
type JavaFrame struct {
	Method Method
	Line   int64
}

// Name returns the function a frame at pc shows: Class.method for a
// compiled method, else the blob's name.
func (c Code) Name() string {
	if c.Method.Name != "" {
		return c.Method.String()
	}
	return c.Blob
}

// ErrNotCode says an address is in none of the JVM's code heaps.
var ErrNotCode = errors.New("not in the JVM's code cache")

// At names the code at pc; now spaces the retries of a JVM not ready.
func (n *Namer) At(pc uint64, now time.Time) (Code, error) {
	if err := n.ready(now); err != nil {
		return Code{}, err
	}
	h, ok := n.cache.Heap(pc)
	if !ok && !now.Before(n.retryAt) {
		// A heap may have grown (its committed part) since it was read.
		n.retryAt = now.Add(retryInterval)
		if cc, err := ReadCodeCache(n.mem, n.layout); err == nil {
			n.cache = cc
			h, ok = cc.Heap(pc)
		}
	}
	if !ok {
		return Code{}, ErrNotCode
	}
	blob, err := BlobAt(n.mem, n.layout, h, pc)
	if err != nil {
		return Code{}, err
	}
	name, err := n.blobName(blob)
	if err != nil {
		return Code{}, fmt.Errorf("blob at %#x: %w", blob, err)
	}
	code := Code{Blob: name}
	if name != "nmethod" && name != "native nmethod" {
		return code, nil
	}
	method, err := MethodOf(n.mem, n.layout, blob)
	if err != nil {
		return code, err
	}
	if code.Method, err = n.method(method); err != nil {
		return code, err
	}
	if n.debug != nil && name == "nmethod" {
		code.Frames = n.compiledFrames(blob, pc)
	}
	return code, nil
}

// compiledFrames returns the Java frames of the nmethod at blob at pc, or
// nil when its debug information does not read.
func (n *Namer) compiledFrames(blob, pc uint64) []JavaFrame {
	code, err := codeBegin(n.mem, n.layout, blob)
	if err != nil {
		return nil
	}
	scopes, err := Scopes(n.mem, n.debug, blob, code, pc, &n.debugs)
	if err != nil {
		return nil
	}
	out := make([]JavaFrame, 0, len(scopes))
	for _, s := range scopes {
		m, err := n.method(s.method)
		if err != nil {
			return nil
		}
		line, _ := LineOf(n.mem, n.layout, n.debug, s.method, s.bci, &n.lines) // 0: unknown
		out = append(out, JavaFrame{m, line})
	}
	return out
}

// codeBegin returns where the instructions of the blob at blob start.
func codeBegin(mem io.ReaderAt, l *Layout, blob uint64) (uint64, error) {
	r := &memReader{mem: mem}
	if !l.BlobCodeIsOffset {
		return r.u64(blob + l.BlobCode)
	}
	b, err := r.bytes(blob+l.BlobCode, 4)
	if err != nil {
		return 0, err
	}
	return blob + uint64(int64(int32(binary.LittleEndian.Uint32(b)))), nil
}

// Method names the Method at method, an interpreted frame's, at bytecode
// index bci (negative: unknown) with its line.
func (n *Namer) Method(method uint64, bci int, now time.Time) (JavaFrame, error) {
	if err := n.ready(now); err != nil {
		return JavaFrame{}, err
	}
	m, err := n.method(method)
	if err != nil {
		return JavaFrame{}, err
	}
	f := JavaFrame{Method: m}
	if n.debug != nil && bci >= 0 {
		f.Line, _ = LineOf(n.mem, n.layout, n.debug, method, bci, &n.lines) // 0: unknown
	}
	return f, nil
}

// method reads the Method at method, or takes it from the cache.
func (n *Namer) method(method uint64) (Method, error) {
	if m, ok := n.methods[method]; ok {
		return m, nil
	}
	m, err := ReadMethod(n.mem, n.layout, method)
	if err != nil {
		return Method{}, fmt.Errorf("method at %#x: %w", method, err)
	}
	if len(n.methods) >= maxNamerMethods {
		clear(n.methods)
	}
	n.methods[method] = m
	return m, nil
}

// ready reads the tables and the code cache the first time, and again
// every retryInterval while the JVM is starting.
func (n *Namer) ready(now time.Time) error {
	if n.cache != nil {
		return nil
	}
	if now.Before(n.retryAt) {
		return n.err
	}
	n.retryAt = now.Add(retryInterval)
	if n.layout == nil {
		vm, err := Read(n.mem, n.addr)
		if err != nil {
			n.err = err
			return err
		}
		if n.layout, err = NewLayout(vm); err != nil {
			n.err = err
			n.retryAt = now.Add(24 * time.Hour) // it will not change
			return err
		}
		n.debug, _ = NewDebugLayout(vm) // nil: frames without lines

	}
	cc, err := ReadCodeCache(n.mem, n.layout)
	if err != nil {
		n.err = err
		return err
	}
	n.cache, n.err = cc, nil
	return nil
}

// blobName reads a blob's name, cached by the name's address (blobs of a
// kind share their name).
func (n *Namer) blobName(blob uint64) (string, error) {
	r := &memReader{mem: n.mem, names: n.blobNames}
	p, err := r.u64(blob + n.layout.BlobName)
	if err != nil {
		return "", err
	}
	if len(n.blobNames) > maxNamerMethods {
		clear(n.blobNames)
	}
	return r.name(p)
}
