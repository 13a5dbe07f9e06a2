package clock

import (
	"errors"
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
}

// A step of the wall clock shows in the offset once the last measurement is
// older than Refresh; a failed measurement keeps the last offset.
func TestOffsetFollowsWallClockSteps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CLOCK_MONOTONIC is read on Linux only")
	}
	saved := measure
	t.Cleanup(func() { measure = saved; current.Store(nil) })
	step := int64(0)
	var fail error
	measure = func() (int64, error) {
		off, err := saved()
		if fail != nil {
			return 0, fail
		}
		return off + step, err
	}
	current.Store(nil)
	before, err := Offset()
	require.NoError(t, err)

	step = int64(5 * time.Minute)
	same, err := Offset()
	require.NoError(t, err)
	require.Equal(t, before, same, "measured again within Refresh")

	age := func() { c := *current.Load(); c.at -= int64(Refresh); current.Store(&c) }
	age()
	stepped, err := Offset()
	require.NoError(t, err)
	require.InDelta(t, float64(before+step), float64(stepped), float64(time.Millisecond))

	fail = errors.New("no clock")
	age()
	kept, err := Offset()
	require.NoError(t, err)
	require.Equal(t, stepped, kept, "a failed measurement keeps the last offset")
}
