package bpfprofilerreceiver

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfprofiler/bpfprofiler/internal/assemble"
	"github.com/bpfprofiler/bpfprofiler/internal/capture"
	"github.com/bpfprofiler/bpfprofiler/internal/probes"
	"github.com/bpfprofiler/bpfprofiler/receiver/bpfprofilerreceiver/internal/metadatatest"
)

// fakeProbes stands in for the kernel side of the probes: the test feeds
// record batches, as the ring buffer reader would deliver them.
type fakeProbes struct {
	feed   chan []capture.RawScope
	read   chan struct{} // a fed batch was delivered
	closed chan struct{}
	once   sync.Once
	drops  []probes.ProbeDrops
}

func newFakeProbes(drops []probes.ProbeDrops) *fakeProbes {
	return &fakeProbes{feed: make(chan []capture.RawScope), read: make(chan struct{}), closed: make(chan struct{}), drops: drops}
}

func (f *fakeProbes) Run(ctx context.Context, deliver func([]capture.RawScope)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.closed:
			return nil
		case recs := <-f.feed:
			deliver(recs)
			f.read <- struct{}{}
		}
	}
}

func (f *fakeProbes) Stats() probes.Stats { return probes.Stats{Drops: f.drops} }

func (f *fakeProbes) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// send feeds n records of probe index probe, in batches as the reader
// delivers them (a few hundred at a time), and returns once they were
// delivered.
func (f *fakeProbes) send(n, probe int) {
	pid := uint32(os.Getpid())
	for n > 0 {
		batch := make([]capture.RawScope, min(n, 500))
		for i := range batch {
			batch[i] = capture.RawScope{ProbeIndex: probe, PID: pid, TID: pid, Comm: "tester", Start: 1, End: 2}
		}
		f.feed <- batch
		<-f.read
		n -= len(batch)
	}
}

// countingLogs is a logs consumer that counts calls and records, and
// answers with consume.
type countingLogs struct {
	calls, seen, records atomic.Int64 // records: accepted ones
	largest              atomic.Int64
	consume              func(context.Context) error
}

func (c *countingLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *countingLogs) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	c.calls.Add(1)
	n := int64(ld.LogRecordCount())
	c.seen.Add(n)
	for old := c.largest.Load(); n > old && !c.largest.CompareAndSwap(old, n); old = c.largest.Load() {
	}
	err := c.consume(ctx)
	if err == nil {
		c.records.Add(n)
	}
	return err
}

// startProbeReceiver starts a receiver with two probes ("a", "b") fed by src
// and next as the logs pipeline.
func startProbeReceiver(t *testing.T, tel *componenttest.Telemetry, interval time.Duration, src *fakeProbes, next consumer.Logs) *profilerReceiver {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.CPU.Enabled = false
	cfg.ReportInterval = interval
	cfg.Probes = []ProbeConfig{
		{ID: "a", FileMatch: "x", Symbol: "f"},
		{ID: "b", FileMatch: "x", Symbol: "g"},
	}
	require.NoError(t, cfg.Validate())
	rcv, err := newProfilerReceiver(cfg, metadatatest.NewSettings(tel))
	require.NoError(t, err)
	rcv.kernel.probes = func(specs []probes.Spec, _ sourceOptions) (probeSource, error) {
		require.Len(t, specs, 2)
		return src, nil
	}
	rcv.setLogsConsumer(next)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	require.NotNil(t, rcv.probes)
	return rcv
}

// counters returns the data points of a counter, keyed by their attributes
// ("probe.id=a,reason=refused"; "" without attributes).
func counters(t *testing.T, tel *componenttest.Telemetry, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := tel.GetMetric(name)
	if err != nil {
		return out // nothing recorded yet
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		var kv []string
		for _, a := range dp.Attributes.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		out[strings.Join(kv, ",")] += dp.Value
	}
	return out
}

func sum(m map[string]int64, contains string) int64 {
	var n int64
	for k, v := range m {
		if strings.Contains(k, contains) {
			n += v
		}
	}
	return n
}

// Behind a consumer that refuses everything, every batch is counted as a
// failed logs report and its records as refused, nothing is retried, and
// the receiver never holds more than its bound.
func TestProbeLogsRefusingConsumer(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	src := newFakeProbes([]probes.ProbeDrops{{RateLimited: 7, RingBufferFull: 3}, {}})
	next := &countingLogs{consume: func(context.Context) error { return errors.New("queue is full") }}
	rcv := startProbeReceiver(t, tel, 100*time.Millisecond, src, next)
	runner := rcv.probes

	const fed = 60000
	for range fed / 1000 {
		src.send(500, 0)
		src.send(500, 1)
	}
	require.NoError(t, rcv.Shutdown(context.Background()))

	_, peak := runner.buf.held()
	dropped := counters(t, tel, "otelcol_bpfprofiler_probe_records_dropped")
	t.Logf("%d ConsumeLogs calls, largest batch %d, peak held %d, dropped %v", next.calls.Load(), next.largest.Load(), peak, dropped)
	assert.LessOrEqual(t, peak, maxBufferedProbeRecords, "records held at once")
	assert.LessOrEqual(t, next.largest.Load(), int64(probeBatchRecords), "records per ConsumeLogs")
	assert.Equal(t, map[string]int64{"probe.id=a": fed / 2, "probe.id=b": fed / 2},
		counters(t, tel, "otelcol_bpfprofiler_probe_records"))
	assert.Equal(t, int64(fed), sum(dropped, "reason=refused")+sum(dropped, "reason=buffer_full"),
		"every record read was refused or did not fit")
	assert.Equal(t, next.seen.Load(), sum(dropped, "reason=refused"), "refused = handed to the consumer")
	assert.Equal(t, map[string]int64{"signal=logs": next.calls.Load()},
		counters(t, tel, "otelcol_bpfprofiler_reports_failed"), "one failed report per refused batch")
	assert.Equal(t, int64(7), dropped["probe.id=a,reason=rate_limited"], "kernel drops")
	assert.Equal(t, int64(3), dropped["probe.id=a,reason=ringbuf_full"], "kernel drops")
	assert.Zero(t, next.records.Load())
	// The collector's own receiver metrics say the same.
	assert.Equal(t, next.seen.Load(),
		sum(counters(t, tel, "otelcol_receiver_refused_log_records"), "transport=bpf")+
			sum(counters(t, tel, "otelcol_receiver_failed_log_records"), "transport=bpf"))
	assert.Zero(t, sum(counters(t, tel, "otelcol_receiver_accepted_log_records"), ""))
	// One batch per interval or per full batch, not one per reader wakeup.
	assert.Less(t, next.calls.Load(), int64(fed/500), "ConsumeLogs calls")
}

// Behind a consumer that blocks, the reader keeps reading (the kernel ring
// buffer never fills because of it), the receiver holds at most its bound
// and drops the rest as buffer_full; once the consumer moves again, what
// was held is delivered, and Shutdown flushes the rest.
func TestProbeLogsBlockedConsumer(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	src := newFakeProbes(nil)
	release := make(chan struct{})
	next := &countingLogs{consume: func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	rcv := startProbeReceiver(t, tel, 100*time.Millisecond, src, next)
	runner := rcv.probes

	const fed = 100000
	sent := make(chan struct{})
	go func() { src.send(fed, 0); close(sent) }()
	select {
	case <-sent:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("the reader blocked on the consumer")
	}
	now, _ := runner.buf.held()
	assert.Equal(t, maxBufferedProbeRecords, now, "held while the consumer blocks")
	dropped := counters(t, tel, "otelcol_bpfprofiler_probe_records_dropped")
	assert.Equal(t, int64(fed-maxBufferedProbeRecords), dropped["probe.id=a,reason=buffer_full"])

	close(release)
	require.Eventually(t, func() bool { n, _ := runner.buf.held(); return n == 0 }, 10*time.Second, 10*time.Millisecond)
	src.send(100, 1) // delivered by Shutdown, before the next interval
	require.NoError(t, rcv.Shutdown(context.Background()))
	_, peak := runner.buf.held()
	assert.LessOrEqual(t, peak, maxBufferedProbeRecords)
	assert.Equal(t, int64(maxBufferedProbeRecords+100), next.records.Load(), "delivered after the consumer moved, and at shutdown")
	assert.LessOrEqual(t, next.largest.Load(), int64(probeBatchRecords))
	assert.Empty(t, counters(t, tel, "otelcol_bpfprofiler_reports_failed"))
}

// Records are delivered once per report interval, many reads in one
// ConsumeLogs, each with the time it was read as its observed timestamp.
func TestProbeLogsBatchedPerInterval(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	src := newFakeProbes(nil)
	var mu sync.Mutex
	var observed []int64
	sink := &observingLogs{add: func(ld plog.Logs) {
		mu.Lock()
		defer mu.Unlock()
		rls := ld.ResourceLogs()
		for i := range rls.Len() {
			lrs := rls.At(i).ScopeLogs().At(0).LogRecords()
			for j := range lrs.Len() {
				observed = append(observed, int64(lrs.At(j).ObservedTimestamp()))
			}
		}
	}}
	rcv := startProbeReceiver(t, tel, 400*time.Millisecond, src, sink)
	start := time.Now()
	reads := 0
	for time.Since(start) < time.Second {
		src.send(10, reads%2)
		reads++
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, rcv.Shutdown(context.Background()))
	elapsed := time.Since(start)
	calls := sink.calls.Load()
	t.Logf("%d reads in %v -> %d ConsumeLogs calls", reads, elapsed, calls)
	assert.GreaterOrEqual(t, reads, 20)
	// No full batch is read: one call per interval tick (however late the
	// loop ran under -race) plus the shutdown flush.
	ticks := int64(elapsed / (400 * time.Millisecond))
	assert.LessOrEqual(t, calls, ticks+1, "one call per 400ms interval plus the shutdown flush")
	assert.Len(t, observed, 10*reads, "every record delivered, the last ones at shutdown")
	first, last := observed[0], observed[len(observed)-1]
	assert.Greater(t, last-first, int64(500*time.Millisecond), "observed timestamps are read times, not flush times")
}

type observingLogs struct {
	calls atomic.Int64
	add   func(plog.Logs)
}

func (o *observingLogs) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (o *observingLogs) ConsumeLogs(_ context.Context, ld plog.Logs) error {
	o.calls.Add(1)
	o.add(ld)
	return nil
}

// The buffer hands out at most a batch at a time and never holds more than
// its bound.
func TestRecordBuffer(t *testing.T) {
	b := newRecordBuffer(10, 4)
	recs := make([]assemble.ReadScope, 7)
	assert.Equal(t, 7, b.add(recs))
	select {
	case <-b.ready:
	default:
		t.Fatal("a full batch waits: ready must be signalled")
	}
	batch := b.take(1)
	assert.Len(t, batch, 4)
	assert.Equal(t, 3, b.add(recs), "4 in flight + 3 waiting + 3 = the bound")
	assert.Equal(t, 0, b.add(recs))
	now, peak := b.held()
	assert.Equal(t, 10, now)
	assert.Equal(t, 10, peak)
	b.done(len(batch))
	assert.Empty(t, b.take(5), "fewer than least waiting")
	assert.Len(t, b.take(1), 4)
	assert.Len(t, b.take(1), 2)
	assert.Empty(t, b.take(1))
	now, _ = b.held()
	assert.Equal(t, 6, now, "until done")
}
