//go:build linux

package symbolize

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// A process that exits before its files are opened says nothing of them:
// the next process mapping the same file has it read (a failure cached
// would leave the file's frames unnamed in every process while cached).
func TestGoneMappingIsNoFileFailure(t *testing.T) {
	fs := procfs.FS{Root: "/proc"}
	exe := testutil.BuildC(t, "cpuburn.c")
	mapping := func(pid int) procfs.Map {
		ms, err := fs.Maps(uint32(pid))
		require.NoError(t, err)
		for _, m := range ms {
			if m.Executable() && m.Path == exe {
				return m
			}
		}
		require.FailNow(t, "no mapping of "+exe)
		return procfs.Map{}
	}
	gone := testutil.StartWorkloadChild(t, exe, "60")
	m := mapping(gone.Pid())
	require.NoError(t, gone.Kill(testutil.Patient(10*time.Second)))

	s := New(Options{Proc: fs})
	s.mu.Lock()
	defer s.mu.Unlock()
	ef, _ := s.elf(uint32(gone.Pid()), m)
	assert.Nil(t, ef)
	_, cached := s.files.get(keyOf(m))
	assert.False(t, cached, "nothing cached of the file")
	assert.Zero(t, s.stats.FileErrors)

	alive := testutil.StartWorkload(t, exe, "60")
	ef, _ = s.elf(uint32(alive.Process.Pid), mapping(alive.Process.Pid))
	assert.NotNil(t, ef, "the next process's mapping of the file is read")
}
