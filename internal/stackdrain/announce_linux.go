//go:build linux

package stackdrain

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// NewProcessesBuffer is the capacity of the channel Announcer.Pids returns.
const NewProcessesBuffer = 1024

// Announcer forwards the pids a program announces in its new_pids ring
// buffer (bpf/announce.h): each user process once, at its first record, and
// again if its pid is reused after forget_process saw it exit.
type Announcer struct {
	forget link.Link
	reader *ringbuf.Reader
	pids   chan uint32
	done   chan struct{}
	drops  atomic.Uint64 // pids that found the channel full
}

// StartAnnouncer attaches forget (the forget_process program) and reads
// newPids until Close.
func StartAnnouncer(newPids *ebpf.Map, forget *ebpf.Program) (*Announcer, error) {
	a := &Announcer{pids: make(chan uint32, NewProcessesBuffer), done: make(chan struct{})}
	var err error
	if a.forget, err = link.AttachTracing(link.TracingOptions{Program: forget}); err != nil {
		return nil, fmt.Errorf("attach %s: %w", forget, err)
	}
	if a.reader, err = ringbuf.NewReader(newPids); err != nil {
		_ = a.forget.Close()
		return nil, fmt.Errorf("open new-process ring buffer: %w", err)
	}
	go a.read()
	return a, nil
}

// read forwards pids until the reader is closed, then closes the channel. It
// never blocks on the channel: a pid that does not fit is dropped and counted.
func (a *Announcer) read() {
	defer close(a.done)
	defer close(a.pids)
	var rec ringbuf.Record
	for {
		err := a.reader.ReadInto(&rec)
		switch {
		case errors.Is(err, ringbuf.ErrFlushed):
			continue
		case err != nil: // closed
			return
		case len(rec.RawSample) < 4:
			continue
		}
		select {
		case a.pids <- binary.NativeEndian.Uint32(rec.RawSample):
		default:
			a.drops.Add(1)
		}
	}
}

// Pids returns the channel of announced pids (as the collector sees them);
// it is closed by Close.
func (a *Announcer) Pids() <-chan uint32 { return a.pids }

// TakeDrops returns the pids dropped because the channel was full since the
// previous call.
func (a *Announcer) TakeDrops() uint64 { return a.drops.Swap(0) }

// Close detaches forget_process and stops the reader.
func (a *Announcer) Close() error {
	errs := []error{a.forget.Close(), a.reader.Close()}
	<-a.done
	return errors.Join(errs...)
}
