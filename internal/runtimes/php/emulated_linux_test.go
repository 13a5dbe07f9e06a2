package php

import (
	"debug/elf"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestWalkEmulated is TestWalkLive for Debian's arm64 PHP run under
// qemu-user on this machine: the arm64 layouts (the same numbers as
// amd64's) walk a live arm64 engine's memory, with and without opcache.
// opcache's JIT is left out: under qemu it is arm64 code translated
// again, nothing of the machine's.
func TestWalkEmulated(t *testing.T) {
	const arch = "arm64"
	if runtime.GOARCH == arch {
		t.Skip("TestWalkLive walks arm64 natively")
	}
	lines := workloadLines(t)
	for _, v := range testutil.PHPVersions {
		t.Run(arch+"/"+v, func(t *testing.T) {
			p, qemu := testutil.EmulatedPHP(t, arch, v)
			f, err := elf.Open(p.Path)
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, elf.EM_AARCH64, f.Machine)
			in, err := Detect(f)
			require.NoError(t, err)
			for _, mode := range []struct {
				name    string
				opcache bool
			}{
				{"interpreter", false},
				{"opcache", true},
			} {
				t.Run(mode.name, func(t *testing.T) {
					args := append(append(append(qemu[1:], p.Path), p.Args(mode.opcache, "")...), testutil.Workload(t, "phpwork.php"), "60")
					cmd := testutil.StartReadyWorkload(t, qemu[0], args...)
					walkPID(t, in, cmd.Process.Pid, p.Path, lines)
				})
			}
		})
	}
}
