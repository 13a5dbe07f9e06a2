package ruby

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// maxIseqs bounds the iseqs cached per process; recheck is how long a
// cached one is used before its cookie is read again (a freed iseq's
// memory may hold another one later).
const (
	maxIseqs = 4096
	recheck  = 10 * time.Second
)

// process is what is cached about the VM of one process.
type process struct {
	layout *Layout
	mem    io.ReaderAt
	iseqs  map[uint64]cachedIseq
	// object is rb_cObject's address in the process (3.1 finds the ID
	// of __classpath__ from it), classpathID that ID once read.
	object      uint64
	classpathID uint64
	// symbols is ruby_global_symbols in the process (0: not found), names
	// the IDs named from it (an ID's name never changes), attachedID 3.1's
	// ID of __attached__ once found.
	symbols    uint64
	names      map[uint64]string
	attachedID uint64
	// owners are the classes of the method iseqs read through method
	// entries, which name their blocks (blocks.go).
	owners map[uint64]owner
}

// cachedIseq is a frame object read: an iseq, with the class of the
// method entry it was reached through ("" for an iseq frame's own), or a
// C function's method entry (iseq nil) with its method's name ("" when
// not read). singleton says the class is the one a singleton class is
// attached to (its method is named "Class.method"). local is a block's
// method iseq (body.local_iseq), 0 for other iseqs. Its cookie (the object's type, its
// body's or definition's address, and the instructions' address: they
// change when the memory holds something else) was last seen unchanged at
// checked.
type cachedIseq struct {
	iseq      *Iseq
	class     string
	method    string
	singleton bool
	local     uint64
	cookie    [3]uint64
	checked   time.Time
}

// Cached names the frame of the object at object (an iseq or a method
// entry, Layout.FrameObject), at position, from what was read within
// recheck.
func (p *process) Cached(object uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	c, ok := p.iseqs[object]
	if !ok || now.Sub(c.checked) >= recheck {
		return runtimes.Frame{}, false
	}
	return p.frame(c, position), true
}

// Read names the frame of the object at object, at position: the cached
// one while its cookie is unchanged, else the one read now.
func (p *process) Read(object uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	c, ok := p.iseqs[object]
	cookie, cerr := p.cookie(object)
	if !ok || cerr != nil || cookie != c.cookie {
		var err error
		if c, err = p.read(object); err != nil {
			delete(p.iseqs, object)
			return runtimes.Frame{}, err
		}
		c.cookie = cookie
	}
	if len(p.iseqs) >= maxIseqs || p.iseqs == nil {
		p.iseqs = make(map[uint64]cachedIseq)
	}
	c.checked = now
	p.iseqs[object] = c
	return p.frame(c, position), nil
}

// read reads the frame object at object: an iseq, or a method entry with
// its owner's path and, for a Ruby method, its iseq.
func (p *process) read(object uint64) (cachedIseq, error) {
	l := p.layout
	kind, err := l.FrameObject(p.mem, object)
	if err != nil {
		return cachedIseq{}, err
	}
	iseq := object
	var c cachedIseq
	if kind == FrameMethodEntry {
		c.class, c.singleton = p.ownerOf(object)
		if iseq, err = l.MethodIseq(p.mem, object); err != nil {
			// A C function's (or an alias's): named by its ID.
			if id, err := l.MethodOriginalID(p.mem, object); err == nil {
				c.method, _ = p.idName(id)
			}
			return c, nil
		}
	}
	if c.iseq, err = l.ReadIseq(p.mem, iseq); err != nil {
		return cachedIseq{}, err
	}
	if kind == FrameMethodEntry {
		p.learnOwner(iseq, c)
	} else if isBlock(c.iseq.Label) {
		c.local, _ = l.LocalIseq(p.mem, iseq)
	}
	return c, nil
}

// ownerOf is the path of the class owning the method entry me, or for
// a singleton class's method (singleton true) of the class or module it
// is attached to; "" when there is none (an anonymous class, a plain
// object's singleton) or it cannot be read.
func (p *process) ownerOf(me uint64) (path string, singleton bool) {
	l := p.layout
	owner, err := l.methodOwner(p.mem, me)
	if err != nil {
		return "", false
	}
	if l.ClassPathAt == 0 && p.classpathID == 0 && p.object != 0 {
		if b, err := runtimes.ReadMem(p.mem, p.object, 8); err == nil {
			p.classpathID, _ = l.ClasspathID(p.mem, binary.LittleEndian.Uint64(b))
		}
	}
	attached, singleton, err := l.attachedTo(p.mem, owner, p.isAttachedID)
	if err != nil {
		return "", false
	}
	if singleton {
		owner = attached
	}
	if path, err = l.classPathOf(p.mem, owner, p.classpathID); err != nil {
		return "", false
	}
	return path, singleton
}

// isAttachedID says key is the ID of __attached__ (3.1), by its name.
func (p *process) isAttachedID(key uint64) bool {
	if p.attachedID != 0 {
		return key == p.attachedID
	}
	if name, err := p.idName(key); err != nil || name != "__attached__" {
		return false
	}
	p.attachedID = key
	return true
}

// idName is the name of the ID id, from the cache or the symbol table.
func (p *process) idName(id uint64) (string, error) {
	if name, ok := p.names[id]; ok {
		return name, nil
	}
	if p.symbols == 0 {
		return "", fmt.Errorf("%w: the symbol table was not found", ErrNoSymbol)
	}
	name, err := p.layout.IDName(p.mem, p.symbols, id)
	if err != nil {
		return "", err
	}
	if len(p.names) >= maxIDNames || p.names == nil {
		p.names = make(map[uint64]string)
	}
	p.names[id] = name
	return name, nil
}

// cookie reads the object's type bits (T_IMEMO and its imemo type), its
// second word (an iseq's body, a method entry's owner) and the word that
// word points to at BodyIseqEncoded (an iseq's instructions).
func (p *process) cookie(object uint64) ([3]uint64, error) {
	h, err := runtimes.ReadMem(p.mem, object, int(p.layout.IseqBody)+8)
	if err != nil {
		return [3]uint64{}, err
	}
	body := binary.LittleEndian.Uint64(h[p.layout.IseqBody:])
	cookie := [3]uint64{binary.LittleEndian.Uint64(h) & (tMask | 0xf<<imemoShift), body}
	// A method entry's definition may be smaller: its third word is 0.
	if e, err := runtimes.ReadMem(p.mem, body+uint64(p.layout.BodyIseqEncoded), 8); err == nil {
		cookie[2] = binary.LittleEndian.Uint64(e)
	}
	return cookie, nil
}

// cFunction names a C function's frame whose name (an ID) was not read.
const cFunction = "(C function)"

// frame is the frame of c at position: a method's "Class#label" (a
// singleton's "Class.label"), an iseq frame's label, with path and line;
// a C function's "Class#name", "Class#(C function)" when its name was
// not read.
func (c cachedIseq) frame(position uint32) runtimes.Frame {
	if c.iseq == nil {
		name := c.method
		if name == "" {
			name = cFunction
		}
		return runtimes.Frame{Function: qualified(c.class, c.singleton, name)}
	}
	return runtimes.Frame{Function: qualified(c.class, c.singleton, c.iseq.Label), File: c.iseq.Path, Line: int64(c.iseq.Line(position))}
}

// qualified is name after its class: "Class#name", a singleton's
// "Class.name", name alone without a class.
func qualified(class string, singleton bool, name string) string {
	switch {
	case class == "":
		return name
	case singleton:
		return class + "." + name
	}
	return class + "#" + name
}
