// Package usdt reads the USDT (SystemTap SDT) probes an ELF file declares
// in its .note.stapsdt notes: where each probe site is, its semaphore, and
// how to fetch its arguments (args.go). The file is not trusted: every
// note is bounded and checked before use.
//
// A note (sys/sdt.h, and the SystemTap wiki's "UserSpaceProbeImplementation")
// is owner "stapsdt", type 3, with a descriptor of three addresses of the
// file's word size (the probe site's pc, the link-time address of the
// .stapsdt.base section, the semaphore's address or 0) and three
// NUL-terminated strings (provider, name, argument specs). A file moved
// after linking (prelink) has its .stapsdt.base elsewhere: the pc and the
// semaphore move with it.
package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Probe is one probe site of a file (a probe used at several places has a
// Probe per site).
type Probe struct {
	Provider, Name string
	// PC is the link-time address of the site (a nop); Offset is its
	// offset in the file, what a uprobe attaches at.
	PC, Offset uint64
	// Semaphore is the link-time address of the probe's 16-bit counter,
	// 0 for none; SemaphoreOffset its offset in the file (a uprobe's
	// reference counter offset): the kernel increments it while attached,
	// so the program computes the probe's arguments.
	Semaphore, SemaphoreOffset uint64
	// ArgSpecs are the argument specs as written (ParseArgs reads them).
	ArgSpecs string
}

// FullName is "provider:name", as the configuration names a probe.
func (p Probe) FullName() string { return p.Provider + ":" + p.Name }

// Limits on what Probes reads of a file.
const (
	noteType   = 3         // NT_STAPSDT
	noteOwner  = "stapsdt" // the notes' owner
	maxNotes   = 1 << 20   // bytes of .note.stapsdt read
	maxProbes  = 1 << 14   // probe sites kept
	maxNameLen = 1 << 8    // a provider's or probe's name
	maxArgsLen = 1 << 10   // one probe's argument specs
	baseName   = ".stapsdt.base"
	notesName  = ".note.stapsdt"
)

// ErrNoProbes means the file declares no USDT probes.
var ErrNoProbes = errors.New("no USDT probes (.note.stapsdt)")

// Probes returns the probe sites f declares, in the notes' order.
func Probes(f *elf.File) ([]Probe, error) {
	s := f.Section(notesName)
	if s == nil || s.Type != elf.SHT_NOTE {
		return nil, ErrNoProbes
	}
	if s.Size > maxNotes {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", notesName, s.Size, maxNotes)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", notesName, err)
	}
	word := 8
	if f.Class == elf.ELFCLASS32 {
		word = 4
	}
	var base uint64 // where .stapsdt.base is, to undo a move after linking
	if b := f.Section(baseName); b != nil {
		base = b.Addr
	}
	probes, err := notes(data, word, f.ByteOrder, base)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", notesName, err)
	}
	for i := range probes {
		p := &probes[i]
		if p.Offset, err = fileOffset(f, p.PC); err != nil {
			return nil, fmt.Errorf("probe %s: site: %w", p.FullName(), err)
		}
		if p.Semaphore != 0 {
			if p.SemaphoreOffset, err = fileOffset(f, p.Semaphore); err != nil {
				return nil, fmt.Errorf("probe %s: semaphore: %w", p.FullName(), err)
			}
		}
	}
	return probes, nil
}

// notes reads the probes of a .note.stapsdt section's data, whose
// addresses are word bytes; base is where .stapsdt.base is (0: none).
func notes(data []byte, word int, order binary.ByteOrder, base uint64) ([]Probe, error) {
	size := len(data)
	var probes []Probe
	for len(data) > 0 {
		owner, typ, desc, rest, err := nextNote(data, order)
		if err != nil {
			return nil, fmt.Errorf("at byte %d: %w", size-len(data), err)
		}
		data = rest
		if owner != noteOwner || typ != noteType {
			continue
		}
		p, err := parseNote(desc, word, order, base)
		if err != nil {
			return nil, fmt.Errorf("probe %d: %w", len(probes), err)
		}
		if len(probes) == maxProbes {
			return nil, fmt.Errorf("more than %d probe sites", maxProbes)
		}
		probes = append(probes, p)
	}
	if len(probes) == 0 {
		return nil, ErrNoProbes
	}
	return probes, nil
}

// nextNote splits the first note off data: its owner, type, descriptor
// and the notes after it (each part 4-byte aligned).
func nextNote(data []byte, order binary.ByteOrder) (owner string, typ uint32, desc, rest []byte, err error) {
	if len(data) < 12 {
		return "", 0, nil, nil, fmt.Errorf("a note header of %d bytes", len(data))
	}
	nameSize, descSize := uint64(order.Uint32(data)), uint64(order.Uint32(data[4:]))
	typ = order.Uint32(data[8:])
	nameEnd := 12 + align4(nameSize)
	descEnd := nameEnd + align4(descSize)
	if nameSize > maxNameLen || descEnd > uint64(len(data)) {
		return "", 0, nil, nil, fmt.Errorf("a note of %d+%d bytes past the section's end", nameSize, descSize)
	}
	owner = string(bytes.TrimRight(data[12:12+nameSize], "\x00"))
	return owner, typ, data[nameEnd : nameEnd+descSize], data[descEnd:], nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// parseNote reads one probe's descriptor: three words, then provider,
// name and argument specs, each NUL-terminated.
func parseNote(desc []byte, word int, order binary.ByteOrder, base uint64) (Probe, error) {
	if len(desc) < 3*word {
		return Probe{}, fmt.Errorf("a descriptor of %d bytes", len(desc))
	}
	read := func(i int) uint64 {
		if word == 4 {
			return uint64(order.Uint32(desc[i*word:]))
		}
		return order.Uint64(desc[i*word:])
	}
	pc, linkBase, sem := read(0), read(1), read(2)
	if base != 0 && linkBase != 0 {
		pc += base - linkBase // moved after linking: the difference applies to both
		if sem != 0 {
			sem += base - linkBase
		}
	}
	strs := bytes.SplitN(desc[3*word:], []byte{0}, 4)
	if len(strs) < 4 {
		return Probe{}, errors.New("provider, name and arguments not NUL-terminated")
	}
	p := Probe{Provider: string(strs[0]), Name: string(strs[1]), ArgSpecs: string(strs[2]), PC: pc, Semaphore: sem}
	switch {
	case p.Provider == "" || p.Name == "":
		return Probe{}, errors.New("a probe without a provider or name")
	case len(p.Provider) > maxNameLen || len(p.Name) > maxNameLen:
		return Probe{}, fmt.Errorf("a name of more than %d bytes", maxNameLen)
	case len(p.ArgSpecs) > maxArgsLen:
		return Probe{}, fmt.Errorf("argument specs of more than %d bytes", maxArgsLen)
	}
	return p, nil
}

// fileOffset returns the file offset of the link-time address addr: in
// the loadable segment holding it, with file contents there.
func fileOffset(f *elf.File, addr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%#x is in no loaded segment of the file", addr)
}
