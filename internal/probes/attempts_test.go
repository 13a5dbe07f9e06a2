package probes

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed attach is tried again at each rescan, not before, and warned
// about once; final outcomes are never tried again.
func TestAttemptsRetryFailuresAtRescan(t *testing.T) {
	s := newAttempts()
	flaky := attempt{fileID{1, 2}, 0}
	attached := attempt{fileID{1, 2}, 1}
	require.True(t, s.due(flaky))
	require.True(t, s.due(attached))

	require.True(t, s.fail(flaky), "the first failure is warned about")
	s.finish(attached)
	assert.False(t, s.due(flaky), "exec scans before the next rescan skip a failed pair")
	assert.False(t, s.due(attached))
	assert.Equal(t, 1, s.failing())

	s.rescan()
	assert.True(t, s.due(flaky), "a rescan tries it again")
	assert.False(t, s.due(attached), "attached stays attached")
	assert.False(t, s.fail(flaky), "one warning per (probe, file)")
	assert.False(t, s.due(flaky))

	s.rescan()
	require.True(t, s.due(flaky))
	s.finish(flaky)
	assert.Zero(t, s.failing())
	s.rescan()
	assert.False(t, s.due(flaky), "final after it attached")
}

func TestTransientReadError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "open", Path: "/proc/1/root/bin/app", Err: syscall.EACCES}, true},
		{fmt.Errorf("read: %w", syscall.EMFILE), true},
		{fmt.Errorf("malformed ELF /bin/app: %w", errors.New("fault")), false},
		{fmt.Errorf("/bin/app: %w", &elf.FormatError{}), false},
		{errors.New("empty file"), false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, transientReadError(tt.err), "%v", tt.err)
	}
}
