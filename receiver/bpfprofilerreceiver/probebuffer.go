package bpfprofilerreceiver // import "github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver"

import (
	"sync"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
)

const (
	// probeBatchRecords is the most records handed to the logs pipeline in
	// one ConsumeLogs, and the number of waiting records that triggers a
	// flush before the report interval is over.
	probeBatchRecords = 8192
	// maxBufferedProbeRecords bounds the records the receiver holds (waiting,
	// plus the batch being delivered): about 120 bytes each (104 and the
	// thread name), so a slow or blocked next consumer costs at most ~4 MiB
	// here, plus the plog.Logs of the batch in delivery. What does not fit is
	// dropped and counted (reason buffer_full).
	maxBufferedProbeRecords = 4 * probeBatchRecords
)

// recordBuffer holds probe records between the kernel reader and the logs
// pipeline. It is bounded: the records it holds, waiting or in a batch not
// yet done, never exceed max; add takes what fits. Safe for concurrent use.
type recordBuffer struct {
	max, batch int
	// ready receives, without blocking add, when batch records are waiting.
	ready chan struct{}

	mu       sync.Mutex
	pending  []assemble.ReadScope
	inFlight int // records handed out by take, not yet done
	peak     int // most records held at once
}

func newRecordBuffer(maxRecords, batch int) *recordBuffer {
	return &recordBuffer{max: maxRecords, batch: batch, ready: make(chan struct{}, 1)}
}

// add appends a prefix of recs, as much as fits, and returns its length.
func (b *recordBuffer) add(recs []assemble.ReadScope) int {
	b.mu.Lock()
	n := max(min(len(recs), b.max-len(b.pending)-b.inFlight), 0)
	b.pending = append(b.pending, recs[:n]...)
	b.peak = max(b.peak, len(b.pending)+b.inFlight)
	full := len(b.pending) >= b.batch
	b.mu.Unlock()
	if full {
		select {
		case b.ready <- struct{}{}:
		default:
		}
	}
	return n
}

// take hands out the oldest waiting records, at most batch, if at least
// least are waiting; they stay held until done is called with their number.
func (b *recordBuffer) take(least int) []assemble.ReadScope {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.pending), b.batch)
	if n == 0 || n < least {
		return nil
	}
	out := b.pending[:n:n]
	if n == len(b.pending) {
		b.pending = nil // the next add starts a new array; out keeps the old one
	} else {
		b.pending = b.pending[n:]
	}
	b.inFlight += n
	return out
}

// done releases n records handed out by take.
func (b *recordBuffer) done(n int) {
	b.mu.Lock()
	b.inFlight -= n
	b.mu.Unlock()
}

// held returns the records held now and the most held at once.
func (b *recordBuffer) held() (now, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending) + b.inFlight, b.peak
}
