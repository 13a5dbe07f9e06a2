//go:build linux

package unwinder

import (
	"debug/elf"
	"errors"
	"io"

	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
)

// GoLabelStats count the Go executables whose goroutine labels the
// samplers read.
type GoLabelStats struct {
	Processes   uint64 // processes with their executable's offsets loaded
	Unsupported uint64 // Go executables of a release, or a layout, not read (go1.20 and before, stripped unknown ones)
	Failed      uint64 // Go executables whose build info could not be read, or processes whose entry was refused
	NoLabels    uint64 // Go executables without the code that sets labels: none to read, no cost per sample
}

// detectGoLabels returns what reading the labels of ef's processes needs
// when ef is a Go executable, nil otherwise. With goroutines wanted, one
// whose labels are not read (none set, or go_labels off) gets its
// goroutines read only: Layout none.
func (l *Loader) detectGoLabels(r io.ReaderAt, ef *elf.File) *golabels.Binary {
	if l.maps.Contexts == nil || l.noGoLabels && !l.goroutines {
		return nil
	}
	var b *golabels.Binary
	err := noPanic(func() (err error) { b, err = golabels.PrepareGoroutines(r, ef); return err })
	switch {
	case err == nil && !b.SetsLabels && !l.goroutines:
		l.stats.GoLabels.NoLabels++
	case err == nil:
		if !b.SetsLabels || l.noGoLabels {
			b.Offsets.Layout = golabels.NoLayout
		}
		return b
	case errors.Is(err, golabels.ErrNotGo):
	case errors.Is(err, golabels.ErrRelease), errors.Is(err, golabels.ErrNoG), errors.Is(err, golabels.ErrMachine):
		l.stats.GoLabels.Unsupported++
	default:
		l.stats.GoLabels.Failed++
	}
	return nil
}

// addGoLabels loads where pid's threads find their goroutines' labels,
// in executable b loaded with bias.
func (l *Loader) addGoLabels(lp *loadedProcess, b *golabels.Binary, bias uint64) {
	if lp.goLabels != nil {
		return
	}
	lp.goLabels, lp.goBias = b, bias
	if err := l.putContext(lp); err != nil {
		lp.goLabels = nil
		l.stats.GoLabels.Failed++
	}
}

func (l *Loader) ignoreGoLabels() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noGoLabels = true
}

func (l *Loader) readGoroutines() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.goroutines = true
}

// goLabelProcesses counts the processes with an entry loaded.
func (l *Loader) goLabelProcesses() uint64 {
	var n uint64
	for _, lp := range l.procs {
		if lp.goLabels != nil {
			n++
		}
	}
	return n
}
