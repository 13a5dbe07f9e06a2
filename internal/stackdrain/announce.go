package stackdrain

import "time"

// batchDelay is how long the announcement reader lets announcements gather
// after one wakes it, at most. Under exec churn it wakes at most
// 1/batchDelay times a second, however many processes start and exit;
// announcements are late by as much, which nothing needs sooner (a
// process's unwind tables load after it lived 100 ms, its identity and
// mappings are read after as long).
const batchDelay = 50 * time.Millisecond

// gather reads announcements in batches until wait fails or stop is
// closed: wait returns once one is there, then more gather until the next
// batch boundary, then drain hands all of them on.
func gather(wait func() error, drain func(), stop <-chan struct{}, delay time.Duration) {
	t := time.NewTimer(delay)
	t.Stop()
	for {
		if wait() != nil {
			return
		}
		t.Reset(untilBoundary(time.Now(), delay))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		drain()
	}
}

// untilBoundary is the time from now to the next multiple of delay since
// the Unix epoch: the readers of every source (CPU, off-CPU) wake at the
// same instants, and so do the goroutines that handle what they read, so a
// busy host wakes the collector once per delay, not once per source.
func untilBoundary(now time.Time, delay time.Duration) time.Duration {
	return delay - time.Duration(now.UnixNano()%int64(delay))
}
