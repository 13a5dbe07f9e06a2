package hotspot

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// maxSymbolLen bounds the bytes of a class, method or signature name read.
const maxSymbolLen = 1024

// BlobName reads the name of the CodeBlob at blob: "nmethod" for compiled
// Java methods, "Interpreter", a stub's name ("StubRoutines (1)", ...).
func BlobName(mem io.ReaderAt, l *Layout, blob uint64) (string, error) {
	r := &memReader{mem: mem, names: map[uint64]string{}}
	p, err := r.u64(blob + l.BlobName)
	if err != nil {
		return "", err
	}
	return r.name(p)
}

// MethodOf reads the Method* of the nmethod at blob.
func MethodOf(mem io.ReaderAt, l *Layout, blob uint64) (uint64, error) {
	return (&memReader{mem: mem}).u64(blob + l.NMethodMethod)
}

// Method is a Java method's name as the class file has it.
type Method struct {
	Class      string // dotted: java.lang.String
	Name       string
	Signature  string // (J)J
	SourceFile string // String.java; "" when the class has none
}

// String is the frame name profiles show: Class.name.
func (m Method) String() string { return m.Class + "." + m.Name }

// ReadMethod reads the class, name and signature of the Method at method.
func ReadMethod(mem io.ReaderAt, l *Layout, method uint64) (Method, error) {
	r := &memReader{mem: mem}
	cm, err := r.u64(method + l.MethodConst)
	if err != nil {
		return Method{}, fmt.Errorf("the method's ConstMethod: %w", err)
	}
	cp, err := r.u64(cm + l.ConstMethodConstants)
	if err != nil {
		return Method{}, fmt.Errorf("the method's constant pool: %w", err)
	}
	holder, err := r.u64(cp + l.PoolHolder)
	if err != nil {
		return Method{}, fmt.Errorf("the method's class: %w", err)
	}
	klassName, err := r.u64(holder + l.KlassName)
	if err != nil {
		return Method{}, fmt.Errorf("the class's name: %w", err)
	}
	// The SourceFile attribute's index, and the pool it indexes: the
	// method's, or the class's where the class holds the index.
	sourcePool, sourceIndex := cp, cp+l.PoolSourceFile
	if l.SourceFileInKlass {
		if sourcePool, err = r.u64(holder + l.KlassConstants); err != nil {
			return Method{}, fmt.Errorf("the class's constant pool: %w", err)
		}
		sourceIndex = holder + l.PoolSourceFile
	}
	var m Method
	if m.Class, err = r.symbol(l, klassName); err != nil {
		return Method{}, fmt.Errorf("class name: %w", err)
	}
	m.Class = strings.ReplaceAll(m.Class, "/", ".")
	for _, f := range []struct {
		dst         *string
		index, pool uint64
	}{{&m.Name, cm + l.ConstMethodName, cp}, {&m.Signature, cm + l.ConstMethodSignature, cp}, {&m.SourceFile, sourceIndex, sourcePool}} {
		b, err := r.bytes(f.index, 2)
		if err != nil {
			return Method{}, err
		}
		if f.dst == &m.SourceFile && binary.LittleEndian.Uint16(b) == 0 {
			continue // no SourceFile attribute
		}
		// The pool's slots follow it, a word each.
		sym, err := r.u64(f.pool + l.PoolSize + 8*uint64(binary.LittleEndian.Uint16(b)))
		if err != nil {
			return Method{}, err
		}
		if *f.dst, err = r.symbol(l, sym); err != nil {
			return Method{}, err
		}
	}
	return m, nil
}

// symbol reads the bytes of the Symbol at sym.
func (r *memReader) symbol(l *Layout, sym uint64) (string, error) {
	b, err := r.bytes(sym+l.SymbolLength, 2)
	if err != nil {
		return "", err
	}
	n := int(binary.LittleEndian.Uint16(b))
	if n > maxSymbolLen {
		return "", fmt.Errorf("symbol of %d bytes, at most %d read", n, maxSymbolLen)
	}
	if n == 0 {
		return "", nil
	}
	body, err := r.bytes(sym+l.SymbolBody, n)
	if err != nil {
		return "", err
	}
	return string(body), nil
}
