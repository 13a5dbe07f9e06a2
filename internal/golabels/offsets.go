package golabels

import "fmt"

// Offsets are where the runtime keeps what the samplers follow from a
// thread's g to its goroutine's labels (bpf/golabels.h), for one Go
// release: the same on amd64 and arm64.
type Offsets struct {
	GM, GLabels, GGoid   uint32 // runtime.g.m, .labels, .goid
	MG0, MGsignal, MCurg uint32 // runtime.m.g0, .gsignal, .curg
	Layout               Layout // what g.labels points to
}

// Layout is what runtime/pprof's *labelMap, g.labels, points to.
type Layout uint8

const (
	// NoLayout: no labels are read, only the goroutine a thread runs
	// (bpf/golabels.h GO_LABELS_NONE).
	NoLayout Layout = 0
	// LabelMap (Go 1.21-1.23): a map[string]string.
	LabelMap Layout = 1
	// LabelSlice (Go 1.24+): a struct starting with a sorted
	// []struct{key, value string}.
	LabelSlice Layout = 2
)

// release is a Go release (go1.Minor).
type release struct{ minor int }

// knownOffsets are the offsets of each release, read from the DWARF of
// runtime.g, runtime.m and runtime.hmap in linux/amd64 and linux/arm64
// builds, cgo and not, of a program calling pprof.Do, by each release's
// newest patch the Go module proxy served on 2026-11-27 (go1.21.13,
// go1.22.12, go1.23.12, go1.24.13, go1.25.9, go1.26.8, go1.27.3; both
// architectures gave the same). The layout is runtime/pprof/label.go's
// labelMap of each (a map type before go1.24, a struct of a slice since).
// TestOffsetsMatchDWARF checks the running toolchain's against its DWARF,
// and the end-to-end test each release it builds workloads with.
var knownOffsets = map[release]Offsets{
	{21}: {GM: 48, GLabels: 344, GGoid: 152, MG0: 0, MGsignal: 80, MCurg: 192, Layout: LabelMap},
	{22}: {GM: 48, GLabels: 344, GGoid: 152, MG0: 0, MGsignal: 80, MCurg: 192, Layout: LabelMap},
	{23}: {GM: 48, GLabels: 352, GGoid: 160, MG0: 0, MGsignal: 80, MCurg: 192, Layout: LabelMap},
	{24}: {GM: 48, GLabels: 352, GGoid: 160, MG0: 0, MGsignal: 80, MCurg: 192, Layout: LabelSlice},
	{25}: {GM: 48, GLabels: 344, GGoid: 152, MG0: 0, MGsignal: 72, MCurg: 184, Layout: LabelSlice},
	{26}: {GM: 48, GLabels: 352, GGoid: 152, MG0: 0, MGsignal: 72, MCurg: 184, Layout: LabelSlice},
	{27}: {GM: 48, GLabels: 352, GGoid: 152, MG0: 0, MGsignal: 72, MCurg: 184, Layout: LabelSlice},
}

// The hmap fields bpf/golabels.h reads (Go 1.21-1.23, the same DWARF):
// count at 0, B at 9, buckets at 16, oldbuckets at 24; a bucket of
// map[string]string is tophash [8]uint8, keys [8]string, values
// [8]string, overflow: 272 bytes.

// gBlock is how many bytes of g the samplers read at once, from its start
// (g.stack) to past g.m, g.goid and g.labels (GO_G_BLOCK in
// bpf/golabels.h).
const gBlock = 512

// check says whether the samplers can read o: g.m, g.goid and g.labels
// 8-aligned within one block from g's start.
func (o Offsets) check() error {
	hi := max(o.GM, o.GLabels, o.GGoid)
	if o.GM%8 != 0 || o.GLabels%8 != 0 || o.GGoid%8 != 0 || o.GM < 16 || o.GLabels < 16 || o.GGoid < 16 || hi+8 >= gBlock {
		return fmt.Errorf("g.m at %d, g.labels at %d, g.goid at %d: not 8-aligned past g.stack within %d bytes", o.GM, o.GLabels, o.GGoid, gBlock)
	}
	return nil
}
