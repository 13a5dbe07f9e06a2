package sampler

import (
	"math"
	"time"
)

// MapSizes are the capacities of one generation of the CPU program's
// aggregation maps (there are two generations, see stackdrain).
type MapSizes struct {
	Counts uint32 // distinct (pid, tid, user stack, kernel stack) keys
	Stacks uint32 // distinct stacks, user and kernel
}

// Bounds of the derived sizes. The stack maps are preallocated: perf_event
// programs may only use preallocated hash maps before Linux 6.1, and a
// preallocated map cannot fail an insert for lack of memory in NMI context.
// A stack entry costs about 1088 bytes (a 1016-byte value of 127 frames plus
// the element header; bpftool's memlock: 1024 entries 1.1 MB, 8192 entries
// 8.9 MB, 32768 entries 35.7 MB), a counts entry about 100 bytes. The floor
// keeps the default 19 Hz on a few CPUs at ~1.1 MB per generation instead of
// the 8.9 MB of a fixed 8192; the cap bounds a high rate on many CPUs at
// 35.7 MB per generation (71 MB in all). A window with more distinct stacks
// than that keeps its samples with a "stack map full" marker (counted);
// shorten report_interval to avoid it.
const (
	minStackEntries = 1024
	maxStackEntries = 32768
	minCountEntries = 4096
	maxCountEntries = 65536
	sizeGranule     = 1024
	// defaultWindow sizes the maps when Options.ReportInterval is 0.
	defaultWindow = 10 * time.Second
)

// mapSizes sizes the maps for the samples one drain window can hold: hz per
// CPU on cpus CPUs for window, plus a quarter for a drain that comes late.
// Each sample adds at most one counts key and, in practice, at most one new
// stack (a sample in user mode has no kernel stack, and kernel stacks repeat
// far more than user stacks).
func mapSizes(hz uint64, cpus int, window time.Duration) MapSizes {
	samples := float64(hz) * float64(max(cpus, 1)) * window.Seconds() * 1.25
	return MapSizes{
		Counts: granular(samples, minCountEntries, maxCountEntries),
		Stacks: granular(samples, minStackEntries, maxStackEntries),
	}
}

// granular rounds n up to a multiple of sizeGranule within [lo, hi].
func granular(n float64, lo, hi uint32) uint32 {
	if n >= float64(hi) {
		return hi
	}
	v := uint32(math.Ceil(n/sizeGranule)) * sizeGranule
	return min(max(v, lo), hi)
}
