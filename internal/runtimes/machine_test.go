package runtimes

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequireWalkedMachine(t *testing.T) {
	for _, tc := range []struct {
		machine elf.Machine
		ok      bool
	}{
		{elf.EM_X86_64, true},
		{elf.EM_AARCH64, true},
		{elf.EM_386, false},
		{elf.EM_RISCV, false},
	} {
		err := RequireWalkedMachine(&elf.File{FileHeader: elf.FileHeader{Machine: tc.machine}}, "the walker")
		if tc.ok {
			assert.NoError(t, err, "%v", tc.machine)
		} else {
			assert.ErrorContains(t, err, "the walker reads x86-64 and arm64 frames only, not "+tc.machine.String(), "%v", tc.machine)
		}
	}
}
