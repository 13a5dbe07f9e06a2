package probes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
)

// recordSize is sizeof(struct probe_record) in bpf/probe.bpf.c, from its
// bpf2go type; stackRecordSize that of a record followed by its entry
// stack (struct probe_stack_record).
var (
	recordSize      = binary.Size(bpf.ProbeProbeRecord{})
	stackRecordSize = binary.Size(bpf.ProbeProbeStackRecord{})
	argsSize        = binary.Size(bpf.ProbeProbeArgs{})
)

// decodeRecord decodes one struct probe_record, or struct
// probe_stack_record, and the goroutine labels or USDT arguments that
// follow either, into the capture type; undecodable counts labels left out (not UTF-8).
func decodeRecord(b []byte) (_ capture.RawScope, undecodable int, _ error) {
	if len(b) < recordSize {
		return capture.RawScope{}, 0, fmt.Errorf("probe record of %d bytes, want %d", len(b), recordSize)
	}
	var rec bpf.ProbeProbeRecord
	if _, err := binary.Decode(b, binary.LittleEndian, &rec); err != nil {
		return capture.RawScope{}, 0, fmt.Errorf("probe record: %w", err)
	}
	comm := make([]byte, 0, len(rec.Comm))
	for _, c := range rec.Comm {
		if c == 0 {
			break
		}
		comm = append(comm, byte(c))
	}
	out := capture.RawScope{
		Start:      rec.StartNs,
		End:        rec.EndNs,
		PID:        rec.Pid,
		TID:        rec.Tid,
		ProbeIndex: int(rec.ProbeIndex),
		Comm:       string(comm),
	}
	labels := recordSize // where the labels start: after the entry stack, if there is one
	switch n := rec.StackFrames; {
	case n == 0:
	case n < 0:
		out.EntryStackLoss = entryStackLoss(n)
		labels = stackRecordSize
	default:
		if len(b) < stackRecordSize {
			return capture.RawScope{}, 0, fmt.Errorf("probe record with an entry stack of %d bytes, want %d", len(b), stackRecordSize)
		}
		frames := b[recordSize:stackRecordSize]
		n = min(n, int32(len(frames)/8))
		out.EntryStack = make([]uint64, n)
		for i := range out.EntryStack {
			out.EntryStack[i] = binary.LittleEndian.Uint64(frames[8*i:])
		}
		labels = stackRecordSize
	}
	if rec.Args != 0 {
		if len(b) < labels+argsSize {
			return capture.RawScope{}, 0, fmt.Errorf("probe record of %d bytes with arguments at %d", len(b), labels)
		}
		var args bpf.ProbeProbeArgs
		if _, err := binary.Decode(b[labels:], binary.LittleEndian, &args); err != nil {
			return capture.RawScope{}, 0, fmt.Errorf("probe record arguments: %w", err)
		}
		out.Args = decodeArgs(&args)
		return out, 0, nil
	}
	if rec.LabelsSize > 0 {
		if rec.LabelsSize > golabels.MaxBytes || len(b) < labels+int(rec.LabelsSize) {
			return capture.RawScope{}, 0, fmt.Errorf("probe record of %d bytes with %d bytes of labels at %d", len(b), rec.LabelsSize, labels)
		}
		out.GoLabels, undecodable = golabels.Decode(b[labels:labels+int(rec.LabelsSize)], nil)
	}
	return out, undecodable, nil
}

// decodeArgs decodes a record's USDT arguments: each slot's integer and
// string (up to its NUL, invalid UTF-8 replaced), both kept: the probe's
// attribute says which it is.
func decodeArgs(a *bpf.ProbeProbeArgs) []capture.ProbeArg {
	out := make([]capture.ProbeArg, len(a.Values))
	for i := range out {
		s := a.Strs[i][:]
		if n := bytes.IndexByte(s, 0); n >= 0 {
			s = s[:n]
		}
		out[i] = capture.ProbeArg{Int: int64(a.Values[i]), Str: strings.ToValidUTF8(string(s), "\uFFFD"), Failed: a.Failed&(1<<i) != 0}
	}
	return out
}

// entryStackLoss says why a record carries no entry stack (-errno from
// bpf/probe.bpf.c): -ENOENT, its scope's stack was not kept (evicted, or
// the probe attached mid-scope); anything else, the capture failed.
func entryStackLoss(errno int32) capture.StackLoss {
	if errno == -2 { // ENOENT
		return capture.StackMissing
	}
	return capture.StackCaptureFailed
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
	// undecodable counts goroutine labels left out of records (nil: not counted).
	undecodable func(uint64)
}

// readRecords reads records from r until it is closed or interrupted and
// hands them to deliver in batches: a batch ends when the ring buffer is
// empty or maxBatch records were read. Records with an index >= nprobes are
// malformed. When a Read is interrupted and stopped reports true, it returns
// nil.
func readRecords(r ringReader, nprobes int, stopped func() bool, deliver func([]capture.RawScope), c counters) error {
	var batch []capture.RawScope
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
		rec, undecodable, err := decodeRecord(b)
		if undecodable > 0 && c.undecodable != nil {
			c.undecodable(uint64(undecodable))
		}
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
