package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// machines is the ELF machine of each supported architecture.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// CheckBinary refuses a file that is not a static Linux executable of the
// platform's machine: the image has no libc and no dynamic loader.
func CheckBinary(path string, p v1.Platform) error {
	want, ok := machines[p.Architecture]
	if p.OS != "linux" || !ok {
		return fmt.Errorf("%s: platform %s is not supported (linux/amd64, linux/arm64)", path, p.String())
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF file: %w", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s: ELF machine is %s, %s needs %s", path, f.Machine, p.String(), want)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s: ELF type %s is not an executable", path, f.Type)
	}
	i := slices.IndexFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	if i < 0 {
		return nil
	}
	interp, err := io.ReadAll(f.Progs[i].Open())
	if err != nil {
		return fmt.Errorf("%s: read PT_INTERP: %w", path, err)
	}
	return fmt.Errorf("%s: dynamically linked (interpreter %s); the image has no libc: build it with CGO_ENABLED=0",
		path, bytes.TrimRight(interp, "\x00"))
}
