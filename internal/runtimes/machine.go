package runtimes

import (
	"debug/elf"
	"fmt"
)

// RequireX86 refuses a file of another machine than x86-64, for a walker
// (named by what) that reads x86-64 frames only: on arm64 the runtime's
// frames are walked by frame pointers and left unnamed.
func RequireX86(f *elf.File, what string) error {
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s reads x86-64 frames only, not %v ones: the frames of this file's code are walked by frame pointers", what, f.Machine)
	}
	return nil
}
