//go:build linux

package probes

import (
	"debug/elf"
	"fmt"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
)

// maxGoLabelFiles is go_probe_files' size (bpf/probe.bpf.c
// MAX_GO_PROBE_FILES): Go executables whose records carry labels.
const maxGoLabelFiles = 1024

// goLabelFiles gives each probed Go executable that sets goroutine labels
// its entry in go_probe_files, where the exit probes find its labels; the
// entry's index + 1 is the upper half of its uprobes' attach cookie.
type goLabelFiles struct {
	put func(index uint32, f bpf.ProbeGoProbeFile) error
	log *zap.Logger

	mu     sync.Mutex
	files  map[fileID]uint64 // cookie upper halves; 0: none
	next   uint32
	warned bool
}

func newGoLabelFiles(put func(uint32, bpf.ProbeGoProbeFile) error, log *zap.Logger) *goLabelFiles {
	return &goLabelFiles{put: put, log: log, files: map[fileID]uint64{}}
}

// cookie returns the upper half of the attach cookie of the Go uprobes in
// file f (id): its go_probe_files index + 1, shifted; 0 when its records
// carry no labels (it sets none, its release is not read, or the table is
// full).
func (g *goLabelFiles) cookie(id fileID, f *os.File) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.files[id]; ok {
		return c
	}
	g.files[id] = 0
	b, err := prepareLabels(f)
	if err != nil {
		g.log.Debug("Go probe records carry no goroutine labels", zap.String("file", f.Name()), zap.Error(err))
		return 0
	}
	if g.next >= maxGoLabelFiles {
		if !g.warned {
			g.warned = true
			g.log.Warn("Go probe records of more executables carry no goroutine labels", zap.Int("executables_with_labels", maxGoLabelFiles))
		}
		return 0
	}
	if err := g.put(g.next, bpf.ProbeGoProbeFile{G_labels: uint32(b.Offsets.GLabels), Layout: uint32(b.Offsets.Layout)}); err != nil {
		g.log.Debug("Go probe records carry no goroutine labels", zap.String("file", f.Name()), zap.Error(err))
		return 0
	}
	g.next++
	g.files[id] = uint64(g.next) << 32
	return g.files[id]
}

// prepareLabels reads what the exit probes need to read the labels of f's
// goroutines; a parser's panic on a crafted file (the process's to
// choose) is an error.
func prepareLabels(f *os.File) (b *golabels.Binary, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("malformed file: %v", r)
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, err
	}
	return golabels.Prepare(f, ef)
}
