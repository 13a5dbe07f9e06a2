package probes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// recordSize is sizeof(struct probe_record) in bpf/probe.bpf.c.
const recordSize = 8 + 8 + 4 + 4 + 4 + 16 + 4

// decodeRecord decodes one struct probe_record (little endian).
func decodeRecord(b []byte) (Record, error) {
	if len(b) < recordSize {
		return Record{}, fmt.Errorf("probe record of %d bytes, want %d", len(b), recordSize)
	}
	le := binary.LittleEndian
	comm := b[28:44]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	return Record{
		Start:      le.Uint64(b[0:]),
		End:        le.Uint64(b[8:]),
		PID:        le.Uint32(b[16:]),
		TID:        le.Uint32(b[20:]),
		ProbeIndex: int(le.Uint32(b[24:])),
		Comm:       string(comm),
	}, nil
}

// decodeExec decodes one exec event: the new process's pid (in
// Options.PIDNamespace).
func decodeExec(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("exec event of %d bytes, want 4", len(b))
	}
	return binary.LittleEndian.Uint32(b), nil
}

// ringReader is the part of a ring buffer reader the read loops use; tests
// replace the BPF ring buffer with a fake.
type ringReader interface {
	// Read blocks for the next sample. It returns errInterrupted when
	// flushed or closed.
	Read() ([]byte, error)
	// Pending reports whether more samples can be read without blocking.
	Pending() bool
}

var errInterrupted = errors.New("ring buffer read interrupted")

// maxBatch bounds the records handed to the caller at once.
const maxBatch = 1024

// counters are updated by the read loop.
type counters struct {
	delivered, malformed func(uint64)
}

// readRecords reads records from r until it is closed or interrupted and
// hands them to deliver in batches: a batch ends when the ring buffer is
// empty or maxBatch records were read. Records with an index >= nprobes are
// malformed. When a Read is interrupted and stopped reports true, it returns
// nil.
func readRecords(r ringReader, nprobes int, stopped func() bool, deliver func([]Record), c counters) error {
	var batch []Record
	flush := func() {
		if len(batch) > 0 {
			c.delivered(uint64(len(batch)))
			deliver(batch)
			batch = nil
		}
	}
	for {
		b, err := r.Read()
		if err != nil {
			flush()
			if errors.Is(err, errInterrupted) {
				if stopped() {
					return nil
				}
				continue
			}
			return fmt.Errorf("read probe records: %w", err)
		}
		rec, err := decodeRecord(b)
		if err != nil || rec.ProbeIndex >= nprobes {
			c.malformed(1)
		} else {
			batch = append(batch, rec)
		}
		if len(batch) >= maxBatch || !r.Pending() {
			flush()
		}
	}
}
