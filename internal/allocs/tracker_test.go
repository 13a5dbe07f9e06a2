package allocs

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScale(t *testing.T) {
	for _, tt := range []struct {
		size, rate     uint64
		objects, size2 float64
	}{
		{0, DefaultRate, 0, 0},
		{100, 1, 1, 100},
		{DefaultRate, DefaultRate, 1 / (1 - math.Exp(-1)), DefaultRate / (1 - math.Exp(-1))},
		{1 << 20, 1 << 62, 1 / (1 - math.Exp(-1.0/1024)), (1 << 20) / (1 - math.Exp(-1.0/1024))}, // a rate no runtime sets: 1 GiB
	} {
		o, b := Scale(tt.size, tt.rate)
		require.InDelta(t, tt.objects, o, 1e-9)
		require.InDelta(t, tt.size2, b, 1e-6)
	}
}

// What is live is what was allocated before the process's last garbage
// collection and not freed since; a free of an object not known counts
// as unmatched, an address taken again as replaced, and past maxLive the
// oldest object goes.
func TestTrackerLive(t *testing.T) {
	tr := NewTracker(3)
	m := func(addr uint64, stack ...uint64) Malloc {
		return Malloc{PID: 1, TID: 1, Addr: addr, Size: 1, Rate: 1, Stack: stack}
	}
	tr.Malloc(m(0x10, 1))
	tr.Malloc(m(0x20, 2))
	w := tr.Drain()
	require.Len(t, w.AllocSpace, 2)
	require.Empty(t, w.InuseSpace, "nothing judged by a collection yet")
	tr.Cycle(1)
	tr.Malloc(m(0x30, 2))
	tr.Free(1, 0x10)
	tr.Free(1, 0x99)
	w = tr.Drain()
	require.Len(t, w.AllocSpace, 1)
	require.Equal(t, uint64(1), w.AllocSpace[0].Value)
	require.Len(t, w.InuseSpace, 1, "0x20 only: 0x10 freed, 0x30 newer than the collection")
	require.Equal(t, uint64(1), w.InuseSpace[0].Value)
	require.Equal(t, uint64(1), tr.UnmatchedFrees)

	tr.Malloc(m(0x30, 3)) // its free was lost
	require.Equal(t, uint64(1), tr.Replaced)
	tr.Malloc(m(0x40, 3))
	tr.Malloc(m(0x50, 3))
	require.Equal(t, 3, tr.Live())
	require.Equal(t, uint64(1), tr.Evicted, "0x20, the oldest")
	tr.Cycle(1)
	w = tr.Drain()
	require.Len(t, w.InuseObjects, 1)
	require.Equal(t, uint64(3), w.InuseObjects[0].Value)

	tr.Forget(1)
	require.Zero(t, tr.Live())
	require.Empty(t, tr.Drain().InuseSpace)
	require.Empty(t, tr.PIDs())
}

func TestReleaseMinor(t *testing.T) {
	for v, want := range map[string]int{"go1.21.13": 21, "go1.27.3 X:nodwarf5": 27, "go1.26": 26, "go1.23rc1": 23} {
		got, err := releaseMinor(v)
		require.NoError(t, err)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"devel +abc", "go2.0", "go1.x"} {
		_, err := releaseMinor(v)
		require.ErrorIs(t, err, ErrRelease, v)
	}
}

// Each distinct label set has an id of its own in a window (the assembler
// decodes an id once).
func TestTrackerLabelIDs(t *testing.T) {
	tr := NewTracker(0)
	for i, labels := range []string{"a", "b", "a", ""} {
		m := Malloc{PID: 1, TID: 1, Addr: uint64(i + 1), Size: 1, Rate: 1, Stack: []uint64{uint64(i)}}
		if labels != "" {
			m.Labels = []byte(labels)
		}
		tr.Malloc(m)
	}
	ids := map[string]map[uint32]bool{}
	for _, s := range tr.Drain().AllocSpace {
		if s.GoLabels == nil {
			continue
		}
		if ids[string(s.GoLabels.Data)] == nil {
			ids[string(s.GoLabels.Data)] = map[uint32]bool{}
		}
		ids[string(s.GoLabels.Data)][s.GoLabels.ID] = true
	}
	require.Len(t, ids, 2)
	require.Len(t, ids["a"], 1)
	require.Len(t, ids["b"], 1)
	for id := range ids["a"] {
		require.False(t, ids["b"][id], "a and b share id %d", id)
	}
}

func TestValue(t *testing.T) {
	require.Equal(t, uint64(3), value(2.5))
	require.Equal(t, uint64(math.MaxInt64), value(math.Inf(1)))
	require.Equal(t, uint64(math.MaxInt64), value(math.NaN()))
	require.Equal(t, uint64(math.MaxInt64), value(1e30))
}
