//go:build linux

package stackdrain

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// NewProcessesBuffer is the capacity of the channel Announcer.Events returns.
const NewProcessesBuffer = 1024

// Announcer forwards what a program announces in its new_pids ring buffer
// (bpf/announce.h): each user process once, at its first record, and again
// if its pid is reused after forget_process saw it exit, or after it exec'ed
// (forget_exec sends that first).
//
// It reads in batches (see gather): it waits for the ring in Go's network
// poller, not in a blocking epoll_wait, so no thread sits in a system call
// between announcements (the Go runtime's monitor thread polls at up to
// 50 kHz while one does), and an idle host costs no wakeup.
type Announcer struct {
	links  []link.Link
	reader *ringbuf.Reader // never blocks: its deadline is in the past
	ready  *os.File        // the ring's fd, duplicated into Go's poller
	events chan capture.ProcessEvent
	stop   chan struct{}
	done   chan struct{}
	// stopOnce closes stop and ready.
	stopOnce sync.Once
	drops    atomic.Uint64 // events that found the channel full
}

// StartAnnouncer attaches forget (forget_process and forget_exec) and
// reads newPids until Close.
func StartAnnouncer(newPids *ebpf.Map, forget ...*ebpf.Program) (*Announcer, error) {
	a := &Announcer{
		events: make(chan capture.ProcessEvent, NewProcessesBuffer),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
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
	a.reader.SetDeadline(time.Unix(1, 0))
	if a.ready, err = pollable(newPids); err != nil {
		return nil, errors.Join(fmt.Errorf("poll new-process ring buffer: %w", err), a.reader.Close(), a.closeLinks())
	}
	go func() {
		defer close(a.done)
		defer close(a.events)
		gather(a.waitFunc(), a.drain, a.stop, batchDelay)
	}()
	return a, nil
}

// pollable duplicates the fd of ring into a non-blocking file, which Go's
// network poller watches.
func pollable(ring *ebpf.Map) (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(ring.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "new_pids"), nil
}

// waitFunc returns the wait for gather: until the ring holds a record, in
// Go's poller. A ring the poller cannot watch (no kernel known) is read
// every batchDelay instead.
func (a *Announcer) waitFunc() func() error {
	conn, err := a.ready.SyscallConn()
	if err != nil || errors.Is(a.ready.SetReadDeadline(time.Time{}), os.ErrNoDeadline) {
		return func() error {
			select {
			case <-a.stop:
				return os.ErrClosed
			case <-time.After(batchDelay):
				return nil
			}
		}
	}
	return func() error {
		return conn.Read(func(uintptr) bool { return a.reader.AvailableBytes() > 0 })
	}
}

// drain forwards every record in the ring. It never blocks on the channel:
// an event that does not fit is dropped and counted.
func (a *Announcer) drain() {
	var rec ringbuf.Record
	for a.reader.AvailableBytes() > 0 {
		if err := a.reader.ReadInto(&rec); err != nil {
			return // only records not yet committed are left, or closed
		}
		if len(rec.RawSample) < 4 {
			continue
		}
		select {
		case a.events <- decodeProcessEvent(binary.NativeEndian.Uint32(rec.RawSample)):
		default:
			a.drops.Add(1)
		}
	}
}

func (a *Announcer) closeLinks() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Events returns the channel of announcements; it is closed by Close.
func (a *Announcer) Events() <-chan capture.ProcessEvent { return a.events }

// TakeDrops returns the pids dropped because the channel was full since the
// previous call.
func (a *Announcer) TakeDrops() uint64 { return a.drops.Swap(0) }

// Close detaches the forget programs and stops the reader; safe to call
// twice.
func (a *Announcer) Close() error {
	errs := []error{a.closeLinks()}
	a.stopOnce.Do(func() {
		close(a.stop)
		errs = append(errs, a.ready.Close()) // wakes the wait
	})
	<-a.done
	errs = append(errs, a.reader.Close())
	return errors.Join(errs...)
}
