//go:build linux

package stackdrain

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// batchEntries is how many entries one batch syscall moves: well above
// any hash bucket's length (a smaller batch than a bucket is refused).
const batchEntries = 256

// stackFrames is a stacks map's value (bpf/drainmaps.h stack_trace_t).
type stackFrames [maxStackDepth]uint64

// maxStackDepth is bpf/common.h MAX_STACK_DEPTH.
const maxStackDepth = 127

// drainHash hands every entry of the hash map m to add and deletes it:
// a few batch syscalls per drain (Linux 5.6+), or two syscalls per entry
// where the kernel has no batch operations. Nothing writes m meanwhile.
func drainHash[K, V any](m *ebpf.Map, add func(K, *V)) error {
	keys, values := make([]K, batchEntries), make([]V, batchEntries)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := m.BatchLookupAndDelete(&cursor, keys, values, nil)
		for i := range n {
			add(keys[i], &values[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case first && n == 0 && (errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL)):
			return drainEach(m, add)
		case err != nil:
			return err
		}
	}
}

// drainEach is drainHash entry by entry.
func drainEach[K, V any](m *ebpf.Map, add func(K, *V)) error {
	var (
		k    K
		v    V
		read []K
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		add(k, &v)
		read = append(read, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range read {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// drainCounts reads and deletes every entry of a counts map.
func drainCounts(m *ebpf.Map) (map[stackKey]uint64, error) {
	out := map[stackKey]uint64{}
	err := drainHash(m, func(k stackKey, v *uint64) { out[k] += *v })
	return out, err
}

// drainStacks reads and deletes every stack of a stacks map, including
// those whose count update failed.
func drainStacks(m *ebpf.Map) (map[int32][]uint64, error) {
	if m.ValueSize() != 8*maxStackDepth {
		return nil, fmt.Errorf("stacks map %v: values of %d bytes, want %d", m, m.ValueSize(), 8*maxStackDepth)
	}
	out := map[int32][]uint64{}
	err := drainHash(m, func(id uint32, frames *stackFrames) { out[int32(id)] = trimStack(frames[:]) })
	return out, err
}
