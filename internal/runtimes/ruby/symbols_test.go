package ruby

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSymbols puts at 0x10000 a symbol table of the layout l whose last
// serial is last, its ids (at 0x11000; heap unless embedded) holding one
// unit Array at 0x12000 (on the heap, its elements at 0x13000) with the
// names (embedded Strings from 0x20000) of the given serials.
func fakeSymbols(l Layout, last uint32, embedded bool, names map[uint64]string) fakeMem {
	m := fakeMem{}
	tbl := make([]byte, 32)
	binary.LittleEndian.PutUint32(tbl[symbolsLastID:], last)
	binary.LittleEndian.PutUint64(tbl[symbolsIDs:], 0x11000)
	m[0x10000] = tbl
	ids := make([]byte, 40)
	if embedded {
		binary.LittleEndian.PutUint64(ids, tArray|flNoEmbed|1<<arrayEmbedSh)
		binary.LittleEndian.PutUint64(ids[arrayEmbed:], 0x12000)
	} else {
		binary.LittleEndian.PutUint64(ids, tArray)
		binary.LittleEndian.PutUint64(ids[arrayHeapLen:], 1)
		binary.LittleEndian.PutUint64(ids[l.ArrayHeapPtr:], 0x11100)
		m[0x11100] = binary.LittleEndian.AppendUint64(nil, 0x12000)
	}
	m[0x11000] = ids
	unit := make([]byte, 40)
	binary.LittleEndian.PutUint64(unit, tArray)
	binary.LittleEndian.PutUint64(unit[arrayHeapLen:], idEntryUnit*idEntrySize)
	binary.LittleEndian.PutUint64(unit[l.ArrayHeapPtr:], 0x13000)
	m[0x12000] = unit
	elems := make([]byte, idEntryUnit*idEntrySize*8)
	for i := range idEntryUnit * idEntrySize {
		binary.LittleEndian.PutUint64(elems[i*8:], 0x08) // nil
	}
	at := uint64(0x20000)
	for serial, name := range names {
		binary.LittleEndian.PutUint64(elems[serial*idEntrySize*8:], at)
		m[at] = fakeString(l, name)
		at += 0x100
	}
	m[0x13000] = elems
	return m
}

// fakeString is an embedded String of layout l.
func fakeString(l Layout, s string) []byte {
	b := make([]byte, 64)
	flags := uint64(tString)
	if l.StringLenInHeader {
		binary.LittleEndian.PutUint64(b[l.StringLen:], uint64(len(s)))
	} else {
		flags |= uint64(len(s)) << l.StringEmbedShift
	}
	binary.LittleEndian.PutUint64(b, flags)
	copy(b[l.StringEmbed:], s)
	return b
}

func TestIDName(t *testing.T) {
	const times = 300<<idScopeShift | 1 // a local ID of serial 300
	names := map[uint64]string{'+': "+", 146: "<=>", 300: "times", 301: ""}
	for _, version := range []string{"3.1", "3.3"} {
		l := layouts[version]
		for _, c := range []struct {
			name     string
			id       uint64
			last     uint32
			embedded bool
			want     string // "" for ErrNoSymbol
		}{
			{"a method", times, 400, false, "times"},
			{"ids embedded", times, 400, true, "times"},
			{"an operator: its own serial", '+', 400, false, "+"},
			{"tCMP", 146, 400, false, "<=>"},
			{"past last_id", times, 299, false, ""},
			{"serial 0", 0, 400, false, ""},
			{"no name (nil)", 302 << idScopeShift, 400, false, ""},
			{"an empty name", 301 << idScopeShift, 400, false, ""},
			{"past ids", 600 << idScopeShift, 1000, false, ""},
			{"last_id out of bounds", times, maxSerial + 1, false, ""},
		} {
			t.Run(version+" "+c.name, func(t *testing.T) {
				got, err := l.IDName(fakeSymbols(l, c.last, c.embedded, names), 0x10000, c.id)
				if c.want == "" {
					require.ErrorIs(t, err, ErrNoSymbol)
					return
				}
				require.NoError(t, err)
				require.Equal(t, c.want, got)
			})
		}
	}
}

// Hostile tables: a unit that is no Array, a length past the elements
// read, a name that is no String.
func TestIDNameHostile(t *testing.T) {
	l := layouts["3.3"]
	const id = 300 << idScopeShift
	for name, spoil := range map[string]func(fakeMem){
		"ids not an Array":  func(m fakeMem) { m[0x11000][0] = tString },
		"unit not an Array": func(m fakeMem) { m[0x12000][0] = tImemo },
		"unit too short":    func(m fakeMem) { binary.LittleEndian.PutUint64(m[0x12000][arrayHeapLen:], 10) },
		"ids empty":         func(m fakeMem) { binary.LittleEndian.PutUint64(m[0x11000][arrayHeapLen:], 0) },
		"ids' pointer bad":  func(m fakeMem) { binary.LittleEndian.PutUint64(m[0x11000][l.ArrayHeapPtr:], 0xdead0000) },
		"name not a String": func(m fakeMem) { m[0x20000][0] = tArray },
		"name a Fixnum":     func(m fakeMem) { binary.LittleEndian.PutUint64(m[0x13000][300*idEntrySize*8:], 0x3) },
	} {
		t.Run(name, func(t *testing.T) {
			m := fakeSymbols(l, 400, false, map[uint64]string{300: "times"})
			spoil(m)
			_, err := l.IDName(m, 0x10000, id)
			require.ErrorIs(t, err, ErrNoSymbol)
		})
	}
}

// fakeMethods adds to m (a symbol table, fakeSymbols) method entries of
// layout l: at 0x30000 a C method entry (definition at 0x30100, its
// original_id the ID of serial 300) owned by the class at 0x31000, path
// "Integer"; at 0x32000 a Ruby method entry (iseq at 0x1000, fakeIseq)
// owned by the singleton class at 0x33000, attached to the class at
// 0x34000, path "Burner"; at 0x35000 a C method entry of the singleton
// class at 0x36000 attached to a plain object at 0x37000.
func fakeMethods(t *testing.T, m fakeMem, l Layout) {
	words := func(n int, at map[uint32]uint64) []byte {
		b := make([]byte, n)
		for off, v := range at {
			binary.LittleEndian.PutUint64(b[off:], v)
		}
		return b
	}
	me := func(def, owner uint64) []byte {
		return words(48, map[uint32]uint64{0: tImemo | imemoMent<<imemoShift, l.MethodEntryDef: def, l.MethodEntryOwner: owner})
	}
	m[0x30000] = me(0x30100, 0x31000)
	m[0x30100] = words(48, map[uint32]uint64{0: 1, l.MethodDefOriginalID: 300<<idScopeShift | 1}) // VM_METHOD_TYPE_CFUNC
	m[0x32000] = me(0x32100, 0x33000)
	m[0x32100] = words(48, map[uint32]uint64{0: methodTypeIseq, l.MethodDefIseq: 0x1000, l.MethodDefOriginalID: 0x12341})
	m[0x35000] = me(0x30100, 0x36000)
	m[0x38000] = fakeString(l, "Integer")
	m[0x38100] = fakeString(l, "Burner")
	if l.ClassPathAt != 0 { // 3.3
		class := func(flags, path, attached uint64) []byte {
			return words(int(l.ClassPathAt)+8, map[uint32]uint64{0: flags, l.ClassPathAt: path, l.ClassAttachedAt: attached})
		}
		m[0x31000] = class(tClass, 0x38000, 0)
		m[0x33000] = class(tClass|flSingleton, 0x08, 0x34000)
		m[0x34000] = class(tClass, 0x38100, 0)
		m[0x36000] = class(tClass|flSingleton, 0x08, 0x37000)
		m[0x37000] = words(64, map[uint32]uint64{0: 0x01}) // T_OBJECT
		return
	}
	// 3.1: paths and __attached__ in st_tables of instance variables;
	// __classpath__ and __attached__ are the IDs of serials 310 and 311.
	classpath, attached := uint64(310<<idScopeShift|1), uint64(311<<idScopeShift|1)
	class := func(at, flags, key, value uint64) {
		m[at] = words(40, map[uint32]uint64{0: flags, l.ClassExt: at + 0x100})
		m[at+0x100] = words(16, map[uint32]uint64{l.ClassExtIvTbl: at + 0x200})
		m[at+0x200] = words(56, map[uint32]uint64{stEntriesStart: 0, stEntriesBound: 1, stEntries: at + 0x300})
		m[at+0x300] = words(24, map[uint32]uint64{0: 1, stEntryKey: key, stEntryRecord: value})
	}
	class(0x31000, tClass, classpath, 0x38000)
	class(0x33000, tClass|flSingleton, attached, 0x34000)
	class(0x34000, tClass, classpath, 0x38100)
	class(0x36000, tClass|flSingleton, attached, 0x37000)
	m[0x37000] = words(64, map[uint32]uint64{0: 0x01})
	m[0x39000] = words(8, map[uint32]uint64{0: 0x31000}) // rb_cObject: the class Integer stands in for Object
	m[0x38000] = fakeString(l, "Object")                 // its path is "Object", as ClasspathID looks for
	m[0x20000+0x1000] = fakeString(l, "__attached__")
	binary.LittleEndian.PutUint64(m[0x13000][311*idEntrySize*8:], 0x20000+0x1000)
}

// A C method is named by its ID, a singleton's method by the class it is
// attached to; without the symbol table (or an ID it lacks) a C method is
// its class's "(C function)".
func TestProcessNamesCMethodsAndSingletons(t *testing.T) {
	for _, version := range []string{"3.1", "3.3"} {
		t.Run(version, func(t *testing.T) {
			l := layouts[version]
			cls := "Integer"
			if l.ClassPathAt == 0 {
				cls = "Object" // fakeMethods' class Object stands in for Integer
			}
			for _, c := range []struct {
				name    string
				symbols uint64
				names   map[uint64]string
				object  uint64
				want    string
			}{
				{"C method", 0x10000 - 0x5000, map[uint64]string{300: "times"}, 0x30000, cls + "#times"},
				{"no symbol table", 0, map[uint64]string{300: "times"}, 0x30000, cls + "#(C function)"},
				{"ID not in the table", 0x10000 - 0x5000, map[uint64]string{}, 0x30000, cls + "#(C function)"},
				{"singleton method", 0x10000 - 0x5000, map[uint64]string{}, 0x32000, "Burner.spin"},
				{"a plain object's singleton", 0x10000 - 0x5000, map[uint64]string{300: "helper"}, 0x35000, "helper"},
			} {
				t.Run(c.name, func(t *testing.T) {
					m := fakeSymbols(l, 400, false, c.names)
					fakeIseq(m, "spin", 0x9000) // 3.3's layout: read through 3.3's process only
					fakeMethods(t, m, l)
					in := &Interpreter{Layout: l, Symbols: c.symbols, Object: 0x39000 - 0x5000}
					p := in.Process(m, 0x5000)
					if l.ClassPathAt == 0 && c.object == 0x32000 {
						// fakeIseq is of 3.3's layout: 3.1 names the frame's class alone.
						owner, singleton := p.(*process).ownerOf(c.object)
						require.Equal(t, "Burner", owner)
						require.True(t, singleton)
						return
					}
					fr, err := p.Read(c.object, 3, time.Unix(1000, 0))
					require.NoError(t, err)
					require.Equal(t, c.want, fr.Function)
				})
			}
		})
	}
}

// Hostile symbol tables make errors, never panics or unbounded reads.
func FuzzIDName(f *testing.F) {
	l := layouts["3.3"]
	m := fakeSymbols(l, 400, false, map[uint64]string{300: "times"})
	f.Add(m[0x10000], m[0x11000], m[0x12000], uint64(300<<idScopeShift|1))
	f.Fuzz(func(t *testing.T, tbl, ids, unit []byte, id uint64) {
		for _, version := range []string{"3.1", "3.3"} {
			l := layouts[version]
			m := fakeSymbols(l, 400, false, map[uint64]string{300: "times"})
			m[0x10000], m[0x11000], m[0x12000] = tbl, ids, unit
			if name, err := l.IDName(m, 0x10000, id); err == nil {
				require.LessOrEqual(t, len(name), 3*maxStringBytes)
			}
		}
	})
}
