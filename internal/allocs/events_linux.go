//go:build linux

package allocs

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// Event layout (bpf/alloc.bpf.c struct alloc_event).
const (
	eventKindMalloc = 1
	eventKindFree   = 3
	eventKindCycle  = 4
	eventKindUSDT   = 5
	eventKindUFree  = 6
	eventKindExec   = 7
	eventHeader     = 80
	eventSize       = eventHeader + 8*127
)

// read hands the events to the tracker until the reader closes.
func (m *Manager) read() {
	var rec ringbuf.Record
	for {
		if err := m.reader.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			if errors.Is(err, ringbuf.ErrFlushed) {
				select {
				case m.flushed <- struct{}{}:
				default:
				}
			}
			continue
		}
		m.handle(rec.RawSample)
	}
}

func (m *Manager) handle(b []byte) {
	if len(b) < eventHeader {
		return
	}
	le := binary.LittleEndian
	kind, pid, tid := le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:])
	if m.targets != nil && !m.targets[pid] {
		return
	}
	addr, size, rate, weight := le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[40:]), le.Uint64(b[48:])
	m.mu.Lock()
	defer m.mu.Unlock()
	switch kind {
	case eventKindMalloc, eventKindUSDT:
		if len(b) < eventSize {
			return
		}
		frames, labelsSize := int32(le.Uint32(b[12:])), int(le.Uint32(b[56:]))
		ml := Malloc{PID: pid, TID: tid, Comm: cString(b[64:80]), Addr: addr, Size: size, Rate: rate}
		if kind == eventKindUSDT {
			ml.Weight, ml.Native = weight, true
		}
		if frames > 0 && frames <= 127 {
			ml.Stack = make([]uint64, frames)
			for i := range ml.Stack {
				ml.Stack[i] = le.Uint64(b[eventHeader+8*i:])
			}
		} else {
			ml.Loss = capture.StackCaptureFailed
		}
		if labelsSize > 0 && eventSize+labelsSize <= len(b) {
			ml.Labels = append([]byte(nil), b[eventSize:eventSize+labelsSize]...)
		}
		m.tracker.Malloc(ml)
	case eventKindFree, eventKindUFree:
		m.tracker.Free(pid, addr)
	case eventKindCycle:
		m.tracker.Cycle(pid)
	case eventKindExec:
		m.execed(pid)
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// flush waits, for at most flushTimeout, until the reader has read what
// the ring buffer holds now.
func (m *Manager) flush() {
	select {
	case <-m.flushed: // a late one, of a flush that timed out
	default:
	}
	if err := m.reader.Flush(); err != nil {
		return
	}
	t := time.NewTimer(flushTimeout)
	defer t.Stop()
	select {
	case <-m.flushed:
	case <-m.stop:
	case <-t.C:
	}
}
