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
// path (anonymous, singleton). 3.3 keeps the path in rb_classext_t; 3.1 in
// the class's instance variable __classpath__, whose ID classpathID is
// (ClasspathID; unused by 3.3).
func (l *Layout) ClassPath(mem io.ReaderAt, cme, classpathID uint64) (string, error) {
	h, err := runtimes.ReadMem(mem, cme, int(l.MethodEntryOwner)+8)
	if err != nil {
		return "", fmt.Errorf("read method entry at %#x: %w", cme, err)
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tImemo || flags>>imemoShift&0xf != imemoMent {
		return "", fmt.Errorf("not a method entry at %#x (flags %#x)", cme, flags)
	}
	owner := binary.LittleEndian.Uint64(h[l.MethodEntryOwner:])
	var path uint64
	if l.ClassPathAt != 0 {
		c, err := l.readClass(mem, owner, l.ClassPathAt)
		if err != nil {
			return "", err
		}
		path = binary.LittleEndian.Uint64(c[l.ClassPathAt:])
	} else {
		if classpathID == 0 {
			return "", errors.New("no __classpath__ ID")
		}
		if path, err = l.classIvar(mem, owner, func(key, _ uint64) bool { return key == classpathID }); err != nil {
			return "", err
		}
	}
	if special(path) {
		return "", fmt.Errorf("class at %#x has no path", owner)
	}
	return l.readString(mem, path)
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
