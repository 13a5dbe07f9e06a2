// Package ruby is the CRuby runtime (internal/runtimes): it recognises a
// Ruby VM (libruby, or a ruby executable linked statically) in an ELF file
// by the version string it exports, gives the struct offsets of its
// version (layout.go), walks a thread's control frames as the BPF walker
// (bpf/ruby.h) will (Walk), and names a frame from its
// instruction sequence (iseq) and position by reading the process's
// memory.
//
// Supported: CRuby 3.1 and 3.3, x86-64 and arm64 (one layout table: the
// offsets it holds are the same on both, docs/ruby-layouts.md; arm64's
// files are read in tests, not run). Frames are named by the iseq's label
// after the class of the method entry the walker recorded ("Burner#spin",
// a singleton's "Burner.helper"; 3.1 and 3.3 keep no class in an iseq), C
// methods by their IDs' names in the VM's symbol table (symbols.go:
// "Integer#times"), blocks by their method's class once known (blocks.go:
// "block in Burner#work").
package ruby

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/elfsym"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// Symbols Detect reads.
const (
	symVersion       = "ruby_version"        // const char[]: "3.1.2"
	symDescription   = "ruby_description"    // "ruby 3.3.8 (2025-04-09 revision b200bad6cd) [x86_64-linux-gnu]"
	symVMPtr         = "ruby_current_vm_ptr" // rb_vm_t*: exported by 3.1, hidden from 3.3
	symCurrentEC     = "ruby_current_ec"     // TLS rb_execution_context_t*: exported by 3.1, hidden from 3.3
	symThreadCurrent = "rb_thread_current"   // exported; reads ruby_current_ec first (GET_EC())
	symObject        = "rb_cObject"          // VALUE: the class Object
)

// Runtime is CRuby, as internal/runtimes describes a runtime.
var Runtime = &runtimes.Runtime{
	Name:    "ruby",
	ProcMap: "ruby_procs",
	ID:      4, // capture.Runtime, bpf/common.h RUNTIME_RUBY
	// vm_exec_core runs the frames of one vm_exec call; both are local
	// symbols, absent from Debian's stripped libruby: EntryRange finds
	// vm_exec_core's range without them (docs/ruby-layouts.md).
	EntryFunction: "vm_exec_core",
	EntryRange:    EntryRange,
	EntryCode:     yjitCode,
	Exports:       []string{symVersion},
	Static:        true,
	Detect: func(f *elf.File) (runtimes.Interpreter, error) {
		in, err := Detect(f)
		if errors.Is(err, ErrNotRuby) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return in, nil
	},
}

// ErrNotRuby means the file holds no Ruby VM (no ruby_version).
var ErrNotRuby = errors.New("not a Ruby VM")

// ErrUnsupported wraps the error of a Ruby this package cannot walk; the
// message names the version.
var ErrUnsupported = errors.New("unsupported Ruby")

// Interpreter is a Ruby VM found in one ELF file. Addresses are link-time
// (add the load bias).
type Interpreter struct {
	Version     string      // "3.3.8"
	Machine     elf.Machine // x86-64 or arm64: how ruby_current_ec's TLS slot reads
	Description string      // ruby_description, when the file has it
	Layout      Layout
	// VMPtr is the address of ruby_current_vm_ptr, 0 where the file hides
	// it (3.3).
	VMPtr uint64
	// ECTLS is where ruby_current_ec, the running thread's execution
	// context, is in thread-local storage (ECTLSOffset); zero when not
	// found.
	ECTLS ECTLS
	// Object is the address of rb_cObject (the class Object), where 3.1
	// finds the ID of __classpath__ (Layout.ClasspathID); 0 if not
	// exported.
	Object uint64
	// Symbols is the address of ruby_global_symbols, the symbol table
	// that names IDs (SymbolsAddress); 0 if not found: C functions are
	// then not named.
	Symbols uint64
}

// Detect finds the Ruby VM in f: ErrNotRuby when f has no ruby_version, an
// error wrapping ErrUnsupported for a version without a layout.
func Detect(f *elf.File) (*Interpreter, error) {
	syms := definedSymbols(f, symVersion, symDescription, symVMPtr, symObject)
	vs, ok := syms[symVersion]
	if !ok {
		return nil, ErrNotRuby
	}
	b, err := readFileData(f, vs.Value, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: read ruby_version: %v", ErrUnsupported, err)
	}
	version, _, _ := bytes.Cut(b, []byte{0})
	in := &Interpreter{Version: string(version), Machine: f.Machine}
	if d, ok := syms[symDescription]; ok && d.Size > 0 && d.Size < 256 {
		if b, err := readFileData(f, d.Value, int(d.Size)); err == nil {
			in.Description = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Class != elf.ELFCLASS64 || (f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_AARCH64) {
		return nil, fmt.Errorf("%w %s on %s: only x86-64 and arm64 are supported", ErrUnsupported, in.Version, f.Machine)
	}
	if in.Layout, err = layoutOf(in.Version); err != nil {
		return nil, err
	}
	if s, ok := syms[symVMPtr]; ok {
		in.VMPtr = s.Value
	}
	if s, ok := syms[symObject]; ok {
		in.Object = s.Value
	}
	if t, err := ECTLSOffset(f); err == nil {
		in.ECTLS = t
	}
	if s, err := SymbolsAddress(f); err == nil {
		in.Symbols = s
	}
	return in, nil
}

// layoutOf is the layout of version ("3.1.2"), or an error wrapping
// ErrUnsupported that names the version and those known.
func layoutOf(version string) (Layout, error) {
	l, ok := layouts[minorOf(version)]
	if !ok {
		return Layout{}, fmt.Errorf("%w version %q (supported: %s)", ErrUnsupported, version, strings.Join(knownMinors(), ", "))
	}
	return l, nil
}

// minorOf is "3.1" of "3.1.2".
func minorOf(v string) string {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		if j := strings.IndexByte(v[i+1:], '.'); j >= 0 {
			return v[:i+1+j]
		}
	}
	return v
}

func knownMinors() []string {
	var out []string
	for m := range layouts {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// RuntimeVersion is the VM's version ("3.3.8").
func (in *Interpreter) RuntimeVersion() string { return in.Version }

// Process returns what names the Ruby frames of one process running the
// VM, reading its memory mem.
func (in *Interpreter) Process(mem io.ReaderAt, bias uint64) runtimes.Process {
	p := &process{layout: &in.Layout, mem: mem}
	if in.Object != 0 {
		p.object = in.Object + bias
	}
	if in.Symbols != 0 {
		p.symbols = in.Symbols + bias
	}
	return p
}

// definedSymbols returns those of names f defines, from .dynsym, or from
// .symtab when .dynsym lacks ruby_version (a static ruby).
func definedSymbols(f *elf.File, names ...string) map[string]elf.Symbol {
	found := map[string]elf.Symbol{}
	collect := func(syms []elfsym.Symbol) {
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF {
				continue
			}
			if s.Value == 0 && elf.ST_TYPE(s.Info) != elf.STT_TLS {
				continue
			}
			found[s.Name] = s.Symbol
		}
	}
	match := elfsym.Match{Names: names}
	if syms, err := elfsym.Lookup(f, elf.SHT_DYNSYM, match); err == nil {
		collect(syms)
	}
	if _, ok := found[symVersion]; !ok {
		if syms, err := elfsym.Lookup(f, elf.SHT_SYMTAB, match); err == nil {
			collect(syms)
		}
	}
	return found
}

// readFileData reads n bytes of the file's loaded contents at link-time
// address addr, fewer where its segment ends.
func readFileData(f *elf.File, addr uint64, n int) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr >= p.Vaddr+p.Filesz {
			continue
		}
		n = int(min(uint64(n), p.Vaddr+p.Filesz-addr))
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%d bytes at %#x are not in the file's loaded data", n, addr)
}
