//go:build linux

package stackdrain

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Both ways of draining a hash map hand over every entry once, with its
// value, and leave the map empty: more entries than a batch, and none.
func TestDrainHash(t *testing.T) {
	testutil.RequireBPF(t)
	for _, tt := range []struct {
		name    string
		entries int
		drain   func(*ebpf.Map, func(uint32, *stackFrames)) error
	}{
		{"batches", 3*batchEntries + 7, drainHash[uint32, stackFrames]},
		{"entry by entry", 3*batchEntries + 7, drainEach[uint32, stackFrames]},
		{"empty", 0, drainHash[uint32, stackFrames]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8 * maxStackDepth, MaxEntries: 4096})
			require.NoError(t, err)
			defer m.Close()
			for i := range tt.entries {
				var v stackFrames
				v[0], v[maxStackDepth-1] = uint64(i)+1, uint64(i)*3
				require.NoError(t, m.Put(uint32(i), &v))
			}
			seen := map[uint32]int{}
			require.NoError(t, tt.drain(m, func(k uint32, v *stackFrames) {
				seen[k]++
				assert.Equal(t, uint64(k)+1, v[0], "key %d", k)
				assert.Equal(t, uint64(k)*3, v[maxStackDepth-1], "key %d", k)
			}))
			assert.Len(t, seen, tt.entries)
			for k, n := range seen {
				assert.Equal(t, 1, n, "key %d handed over %d times", k, n)
			}
			var k uint32
			assert.ErrorIs(t, m.NextKey(nil, &k), ebpf.ErrKeyNotExist, "map left with entries")
		})
	}
}
