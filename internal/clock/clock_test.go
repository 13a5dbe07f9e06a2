package clock

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPickTightestSample(t *testing.T) {
	off := pick([]sample{
		{mono1: 100, real: 1_000_500, mono2: 900},   // gap 800
		{mono1: 1000, real: 1_001_010, mono2: 1020}, // gap 20, midpoint 1010
		{mono1: 2000, real: 1_002_300, mono2: 2400},
	})
	require.Equal(t, int64(1_000_000), off)
}

func TestOffsetMatchesWallClock(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := Offset()
		require.Error(t, err)
		return
	}
	off, err := Offset()
	require.NoError(t, err)
	again, err := Offset()
	require.NoError(t, err)
	require.Equal(t, off, again, "the offset is shared")

	ns, err := toUnix(Now())
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.Unix(0, int64(ns)), 10*time.Millisecond)
	require.WithinDuration(t, time.Now(), Wall(), 10*time.Millisecond)
}
