package runtimes

import (
	"debug/elf"
	"fmt"
)

// RequireWalkedMachine refuses a file of another machine than x86-64 and
// arm64, the ones a JIT runtime's walker (named by what) reads the frames
// of: elsewhere the runtime's frames are walked by frame pointers and left
// unnamed.
func RequireWalkedMachine(f *elf.File, what string) error {
	switch f.Machine {
	case elf.EM_X86_64, elf.EM_AARCH64:
		return nil
	}
	return fmt.Errorf("%s reads x86-64 and arm64 frames only, not %v ones: the frames of this file's code are walked by frame pointers", what, f.Machine)
}
