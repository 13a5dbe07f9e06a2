package cpython

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
)

// Symbols Detect looks for. Py_IsNone (3.10+) and PyFrame_GetCode (3.9+)
// tell the minor version of an interpreter older than Py_Version (3.11+).
const (
	symRuntime       = "_PyRuntime"
	symVersion       = "Py_Version"
	symSince310      = "Py_IsNone"
	symSince39       = "PyFrame_GetCode"
	symRefDebugBuild = "_Py_NegativeRefcount" // only in builds with Py_REF_DEBUG (debug builds)
	// firstDebugOffsets is the first minor version whose _PyRuntime opens
	// with _Py_DebugOffsets.
	firstDebugOffsets = 13
)

// Detect finds the CPython interpreter in f: ErrNotPython when f has no
// _PyRuntime, an error wrapping ErrUnsupported when its version or build is
// not one this package knows.
func Detect(f *elf.File) (*Interpreter, error) {
	syms := definedSymbols(f, symRuntime, symVersion, symSince310, symSince39, symRefDebugBuild)
	runtime, ok := syms[symRuntime]
	if !ok {
		return nil, ErrNotPython
	}
	v, err := detectVersion(f, syms)
	if err != nil {
		return nil, err
	}
	// The structures read have one layout on both 64-bit machines: what
	// differs between them (pthread mutexes) lies past the fields read.
	if f.Class != elf.ELFCLASS64 || (f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64) {
		return nil, fmt.Errorf("%w %s on %s: only x86-64 and arm64 are supported", ErrUnsupported, v, f.Machine)
	}
	if _, debug := syms[symRefDebugBuild]; debug {
		return nil, fmt.Errorf("%w %s: a debug build (only release builds are supported)", ErrUnsupported, v)
	}
	if v.Major == 3 && v.Minor >= firstDebugOffsets {
		b, err := readFileData(f, runtime.Value, debugBlockSize(v.Minor))
		if err != nil {
			return nil, fmt.Errorf("%w %s: read _Py_DebugOffsets: %v", ErrUnsupported, v, err)
		}
		o, err := offsetsFromDebug(v, b, runtime.Size)
		if err != nil {
			return nil, err
		}
		_, tested := debugLayoutOf(v.Minor)
		return &Interpreter{Version: v, RuntimeAddr: runtime.Value, Offsets: o, Untested: !tested}, nil
	}
	o, ok := offsetsFor(v)
	if !ok {
		return nil, fmt.Errorf("%w version %s (supported: 3.7 and later)", ErrUnsupported, v)
	}
	return &Interpreter{Version: v, RuntimeAddr: runtime.Value, Offsets: o}, nil
}

// definedSymbols returns those of names f defines, from .dynsym, or from
// .symtab when .dynsym lacks _PyRuntime.
func definedSymbols(f *elf.File, names ...string) map[string]elf.Symbol {
	found := map[string]elf.Symbol{}
	collect := func(syms []elfsym.Symbol) {
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			for _, n := range names {
				if s.Name == n {
					found[n] = s.Symbol
				}
			}
		}
	}
	match := elfsym.Match{Names: names}
	if syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, match); err == nil {
		collect(syms)
	}
	if _, ok := found[symRuntime]; !ok {
		if syms, err := elfsym.Lookup(f, elf.SHT_SYMTAB, match); err == nil {
			collect(syms)
		}
	}
	return found
}

// detectVersion reads Py_Version (3.11+); before it, the minor version comes
// from the symbols the file defines and the patch from the PY_VERSION string
// in .rodata (0 when that is not found).
func detectVersion(f *elf.File, syms map[string]elf.Symbol) (Version, error) {
	if s, ok := syms[symVersion]; ok {
		b, err := readFileData(f, s.Value, 4)
		if err != nil {
			return Version{}, fmt.Errorf("read Py_Version: %w", err)
		}
		hex := binary.LittleEndian.Uint32(b) // PY_VERSION_HEX: 0x030B07F0 is 3.11.7 final
		return Version{int(hex >> 24), int(hex >> 16 & 0xff), int(hex >> 8 & 0xff)}, nil
	}
	minor := 0
	switch {
	case hasSymbol(syms, symSince310):
		minor = 10
	case hasSymbol(syms, symSince39):
		minor = 9
	default: // older than 3.9: name the version when the file says it
		if v, ok := rodataVersion(f, func(v Version) bool { return v.Minor < 9 }); ok {
			return v, nil
		}
		return Version{}, fmt.Errorf("%w version older than 3.9", ErrUnsupported)
	}
	if v, ok := rodataVersion(f, func(v Version) bool { return v.Minor == minor }); ok {
		return v, nil
	}
	return Version{3, minor, 0}, nil
}

func hasSymbol(syms map[string]elf.Symbol, name string) bool {
	_, ok := syms[name]
	return ok
}

// rodataVersion returns the first PY_VERSION string in .rodata accept takes.
func rodataVersion(f *elf.File, accept func(Version) bool) (Version, bool) {
	s := f.Section(".rodata")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return Version{}, false
	}
	data, err := s.Data()
	if err != nil {
		return Version{}, false
	}
	return findVersion(data, accept)
}

// findVersion returns the first PY_VERSION ("3.9.18", "3.10.0rc2",
// "3.9.2+") in data that ends a NUL-terminated string and accept takes: the
// linker may have merged it into the tail of a longer string such as the
// install prefix ".../versions/3.9.18". A scan for "3." rather than a
// regular expression: .rodata is megabytes and this runs at every new
// interpreter file.
func findVersion(data []byte, accept func(Version) bool) (Version, bool) {
	for i := 0; ; i++ {
		j := bytes.Index(data[i:], []byte("3."))
		if j < 0 {
			return Version{}, false
		}
		i += j
		if i > 0 && (isDigit(data[i-1]) || data[i-1] == '.') {
			continue
		}
		if v, ok := parseVersionAt(data[i+2:]); ok && accept(v) {
			return v, true
		}
	}
}

// parseVersionAt parses "minor.patch[{a,b,rc}N][+]\x00" at the start of b.
func parseVersionAt(b []byte) (Version, bool) {
	minor, b, ok := digits(b, 2)
	if !ok || len(b) == 0 || b[0] != '.' {
		return Version{}, false
	}
	patch, b, ok := digits(b[1:], 3)
	if !ok {
		return Version{}, false
	}
	for _, pre := range []string{"a", "b", "rc"} {
		if rest, found := bytes.CutPrefix(b, []byte(pre)); found {
			if _, b, ok = digits(rest, 2); !ok {
				return Version{}, false
			}
			break
		}
	}
	b, _ = bytes.CutPrefix(b, []byte("+"))
	if len(b) == 0 || b[0] != 0 {
		return Version{}, false
	}
	return Version{3, minor, patch}, true
}

// digits parses 1 to max decimal digits at the start of b.
func digits(b []byte, max int) (n int, rest []byte, ok bool) {
	i := 0
	for i < len(b) && i < max && isDigit(b[i]) {
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == 0 || i < len(b) && isDigit(b[i]) {
		return 0, b, false
	}
	return n, b[i:], true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// readFileData reads n bytes of initialised data at link-time address addr.
func readFileData(f *elf.File, addr uint64, n int) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr+uint64(n) > p.Filesz {
			continue
		}
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%d bytes at %#x are not in the file's loaded data", n, addr)
}

// codeHeaderCovers reports whether CodeSize bytes hold every code object
// field ReadCode reads.
func (o *Offsets) codeHeaderCovers() bool {
	for _, end := range []uint32{o.CodeFilename + 8, o.CodeName + 8, o.CodeQualname + 8,
		o.CodeFirstLineNo + 4, o.CodeLineTable + 8, o.CodeCode + 8, o.ObjectType + 8, o.VarObjectSize + 8} {
		if end > o.CodeSize {
			return false
		}
	}
	return true
}
