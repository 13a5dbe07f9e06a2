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

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// NewProcessesBuffer is the capacity of the channel Announcer.Events returns.
const NewProcessesBuffer = 1024

// Announcer forwards what a program announces in its new_pids ring buffer
// (bpf/announce.h): each user process once, at its first record, and again
// if its pid is reused after forget_process saw it exit, or after it exec'ed
// (forget_exec sends that first).
type Announcer struct {
	links  []link.Link
	reader *ringbuf.Reader
	events chan capture.ProcessEvent
	done   chan struct{}
	drops  atomic.Uint64 // events that found the channel full
}

// StartAnnouncer attaches forget (forget_process and forget_exec) and
// reads newPids until Close.
func StartAnnouncer(newPids *ebpf.Map, forget ...*ebpf.Program) (*Announcer, error) {
	a := &Announcer{events: make(chan capture.ProcessEvent, NewProcessesBuffer), done: make(chan struct{})}
	for _, p := range forget {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("attach %s: %w", p, err), a.closeLinks())
		}
		a.links = append(a.links, l)
	}
	var err error
	if a.reader, err = ringbuf.NewReader(newPids); err != nil {
		return nil, errors.Join(fmt.Errorf("open new-process ring buffer: %w", err), a.closeLinks())
	}
	go a.read()
	return a, nil
}

func (a *Announcer) closeLinks() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// read forwards events until the reader is closed, then closes the channel.
// It never blocks on the channel: an event that does not fit is dropped and
// counted.
func (a *Announcer) read() {
	defer close(a.done)
	defer close(a.events)
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
		case a.events <- decodeProcessEvent(binary.NativeEndian.Uint32(rec.RawSample)):
		default:
			a.drops.Add(1)
		}
	}
}

// Events returns the channel of announcements; it is closed by Close.
func (a *Announcer) Events() <-chan capture.ProcessEvent { return a.events }

// TakeDrops returns the pids dropped because the channel was full since the
// previous call.
func (a *Announcer) TakeDrops() uint64 { return a.drops.Swap(0) }

// Close detaches the forget programs and stops the reader.
func (a *Announcer) Close() error {
	errs := []error{a.closeLinks(), a.reader.Close()}
	<-a.done
	return errors.Join(errs...)
}
