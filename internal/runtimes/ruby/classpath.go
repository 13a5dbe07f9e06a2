package ruby

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// st_table (include/ruby/st.h, one in 3.1 to 3.3) and st.c's entries.
const (
	stEntriesStart = 32 // st_table.entries_start (st_index_t)
	stEntriesBound = 40 // st_table.entries_bound
	stEntries      = 48 // st_table.entries (st_table_entry*)
	stEntrySize    = 24 // st_table_entry {hash, key, record}
	stEntryKey     = 8
	stEntryRecord  = 16
	stDeleted      = ^uint64(0) // RESERVED_HASH_VAL: the hash of a deleted entry

	// maxIvars bounds the entries of a class's instance variable table
	// read (a class holds few: __classpath__, its class-level ivars).
	maxIvars = 64
)

// ClassPath is the path ("Burner", "Net::HTTP") of the class or module
// owning the method entry at cme (a frame's ep[VM_ENV_DATA_INDEX_ME_CREF]):
// an error where cme is not a method entry (a cref), or the class has no
// path (anonymous, singleton). classpathID is 3.1's (classPathOf).
func (l *Layout) ClassPath(mem io.ReaderAt, cme, classpathID uint64) (string, error) {
	owner, err := l.methodOwner(mem, cme)
	if err != nil {
		return "", err
	}
	return l.classPathOf(mem, owner, classpathID)
}

// methodOwner is the owner (a class or module) of the method entry at cme.
func (l *Layout) methodOwner(mem io.ReaderAt, cme uint64) (uint64, error) {
	h, err := runtimes.ReadMem(mem, cme, int(l.MethodEntryOwner)+8)
	if err != nil {
		return 0, fmt.Errorf("read method entry at %#x: %w", cme, err)
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tImemo || flags>>imemoShift&0xf != imemoMent {
		return 0, fmt.Errorf("not a method entry at %#x (flags %#x)", cme, flags)
	}
	return binary.LittleEndian.Uint64(h[l.MethodEntryOwner:]), nil
}

// classPathOf is the path of the class or module at class. 3.3 keeps it
// in rb_classext_t; 3.1 in the class's instance variable __classpath__,
// whose ID classpathID is (ClasspathID; unused by 3.3).
func (l *Layout) classPathOf(mem io.ReaderAt, class, classpathID uint64) (string, error) {
	var path uint64
	if l.ClassPathAt != 0 {
		c, err := l.readClass(mem, class, l.ClassPathAt)
		if err != nil {
			return "", err
		}
		path = binary.LittleEndian.Uint64(c[l.ClassPathAt:])
	} else {
		if classpathID == 0 {
			return "", errors.New("no __classpath__ ID")
		}
		var err error
		if path, err = l.classIvar(mem, class, func(key, _ uint64) bool { return key == classpathID }); err != nil {
			return "", err
		}
	}
	if special(path) {
		return "", fmt.Errorf("class at %#x has no path", class)
	}
	return l.readString(mem, path)
}

// attachedTo is the object the singleton class at class is attached to
// (the class Burner of Burner's singleton class, where `def self.helper`
// and module_function put methods); singleton false when class is no
// singleton (FL_SINGLETON clear). 3.3 keeps it in rb_classext_t; 3.1 in
// the instance variable __attached__, the key isAttached says is its ID.
func (l *Layout) attachedTo(mem io.ReaderAt, class uint64, isAttached func(key uint64) bool) (attached uint64, singleton bool, err error) {
	c, err := l.readClass(mem, class, l.ClassAttachedAt)
	if err != nil {
		return 0, false, err
	}
	if binary.LittleEndian.Uint64(c)&flSingleton == 0 {
		return 0, false, nil
	}
	if l.ClassAttachedAt != 0 {
		attached = binary.LittleEndian.Uint64(c[l.ClassAttachedAt:])
	} else if attached, err = l.classIvar(mem, class, func(key, _ uint64) bool { return isAttached(key) }); err != nil {
		return 0, true, err
	}
	if special(attached) {
		return 0, true, fmt.Errorf("singleton class at %#x attached to %#x", class, attached)
	}
	return attached, true, nil
}

// ClasspathID (3.1) is the ID of __classpath__ in the process: interned
// at the VM's start, its number is the process's. It is the key whose
// value is the String "Object" in the instance variable table of the
// class Object, at object (the value of the exported rb_cObject).
func (l *Layout) ClasspathID(mem io.ReaderAt, object uint64) (uint64, error) {
	var id uint64
	_, err := l.classIvar(mem, object, func(key, record uint64) bool {
		if special(record) {
			return false
		}
		if s, err := l.readString(mem, record); err == nil && s == "Object" {
			id = key
			return true
		}
		return false
	})
	if err != nil {
		return 0, fmt.Errorf("__classpath__ of Object: %w", err)
	}
	return id, nil
}

// special says v is no object: an immediate (Fixnum, Symbol, Flonum: low
// bits set) or false, nil, true, undef (0, 0x08, 0x14, 0x24).
func special(v uint64) bool { return v&7 != 0 || v <= 0x24 }

// readClass reads n+8 bytes of the class or module at addr, checking its
// type.
func (l *Layout) readClass(mem io.ReaderAt, addr uint64, n uint32) ([]byte, error) {
	c, err := runtimes.ReadMem(mem, addr, int(n)+8)
	if err != nil {
		return nil, fmt.Errorf("read class at %#x: %w", addr, err)
	}
	if t := binary.LittleEndian.Uint64(c) & tMask; t != tClass && t != tModule {
		return nil, fmt.Errorf("owner at %#x is not a class (type %#x)", addr, t)
	}
	return c, nil
}

// classIvar returns the value of the first live entry of the instance
// variable table (3.1: RClass.ptr->iv_tbl, an st_table) of the class at
// class that match takes, reading the table's entries in order, at most
// maxIvars of them.
func (l *Layout) classIvar(mem io.ReaderAt, class uint64, match func(key, record uint64) bool) (uint64, error) {
	c, err := l.readClass(mem, class, l.ClassExt)
	if err != nil {
		return 0, err
	}
	ext := binary.LittleEndian.Uint64(c[l.ClassExt:])
	t, err := runtimes.ReadMem(mem, ext+uint64(l.ClassExtIvTbl), 8)
	if err != nil {
		return 0, fmt.Errorf("read classext at %#x: %w", ext, err)
	}
	tbl := binary.LittleEndian.Uint64(t)
	if tbl == 0 {
		return 0, fmt.Errorf("class at %#x has no instance variables", class)
	}
	h, err := runtimes.ReadMem(mem, tbl, stEntries+8)
	if err != nil {
		return 0, fmt.Errorf("read st_table at %#x: %w", tbl, err)
	}
	start, bound := binary.LittleEndian.Uint64(h[stEntriesStart:]), binary.LittleEndian.Uint64(h[stEntriesBound:])
	entries := binary.LittleEndian.Uint64(h[stEntries:])
	if bound < start || bound-start > maxIvars {
		return 0, fmt.Errorf("st_table at %#x: entries [%d, %d) (more than %d read)", tbl, start, bound, maxIvars)
	}
	if bound == start {
		return 0, fmt.Errorf("class at %#x: no match in its instance variables", class)
	}
	b, err := runtimes.ReadMem(mem, entries+start*stEntrySize, int(bound-start)*stEntrySize)
	if err != nil {
		return 0, fmt.Errorf("read st_table entries at %#x: %w", entries, err)
	}
	for ; len(b) >= stEntrySize; b = b[stEntrySize:] {
		if binary.LittleEndian.Uint64(b) == stDeleted {
			continue
		}
		key, record := binary.LittleEndian.Uint64(b[stEntryKey:]), binary.LittleEndian.Uint64(b[stEntryRecord:])
		if match(key, record) {
			return record, nil
		}
	}
	return 0, fmt.Errorf("class at %#x: no match in its instance variables", class)
}
