package testutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseQuantity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		bad  bool
	}{{"512Mi", 512 << 20, false}, {"1Gi", 1 << 30, false}, {"64Ki", 64 << 10, false}, {"1000", 1000, false}, {"", 0, true}, {"1.5Gi", 0, true}} {
		got, err := parseQuantity(tc.in)
		if tc.bad {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

// The shipped DaemonSet leaves room below its limit for what the Go
// runtime does not count: the BPF maps (the unwind tables' 64 MiB budget
// and the other maps) and the files the collector maps.
func TestShippedDaemonSetMemory(t *testing.T) {
	m := ShippedDaemonSetMemory(t)
	assert.Equal(t, uint64(512<<20), m.Limit)
	goLimit, err := m.GoMemLimitBytes()
	require.NoError(t, err)
	assert.LessOrEqual(t, goLimit+128<<20, m.Limit, "GOMEMLIMIT %s under limits.memory", m.GoMemLimit)
}
