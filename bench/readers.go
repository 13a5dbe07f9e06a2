package main

// The readers suite: what the samplers' thread-context and Go-label
// readers cost one sample, measured apart from the rest of it. The bench's
// own thread publishes an OTEP 4947 record or runs under pprof labels, and
// the readers run on it in the kernel (BPF_PROG_TEST_RUN of
// bpf/readbench.bpf.c, internal/readbench), readbench.MaxReads times a run,
// timed in BPF. Each case's cost is its ns per read less the loop's (the
// same calls to an empty function); cases alternate within rounds. The
// readers' memory is warm, as it is for a thread sampled over and over: a
// thread's first sample after a long sleep pays cache misses on top. The
// Go cases have the thread's user registers at hand, as a CPU sample in
// user mode has them, but one, which takes them as off-CPU samples do.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/bpfprofiler/bpfprofiler/internal/readbench"
)

const suiteReaders = "readers"

// readerRunsPerRound are the runs of MaxReads reads a case gets a round.
const readerRunsPerRound = 40

// readerCase is one thing published, or none.
type readerCase struct {
	name    string
	outcome uint32 // what every read must find (enum thread_ctx_outcome)
	setup   func(r *readbench.Reader) error
	labels  []string // pprof labels the reads run under
	mode    readbench.Mode
	// before is a record read first, when mode is ReadAfter: each read
	// then finds its attributes the CPU's last, as when another thread
	// ran on the CPU between two samples.
	before []byte
}

func readerCases() []readerCase {
	route := append(readbench.Attribute(0, "/api/checkout"), readbench.Attribute(1, "GET")...)
	full := bytes.Repeat(readbench.Attribute(2, strings.Repeat("v", 86)), 7) // 616 bytes, the most kept
	var long []string
	for i := range 8 {
		long = append(long, fmt.Sprintf("%s%d", strings.Repeat("k", 40), i), strings.Repeat("v", 30))
	}
	publish := func(rec []byte) func(*readbench.Reader) error {
		return func(r *readbench.Reader) error { return r.Publish(rec) }
	}
	nothing := func(*readbench.Reader) error { return nil }
	goLabels := func(r *readbench.Reader) error { _, err := r.ReadGoLabels(); return err }
	return []readerCase{
		{name: "loop alone (subtracted)", setup: nothing, mode: readbench.Loop},
		{name: "peer: one 8-byte bpf_probe_read_user to the stack", setup: nothing, mode: readbench.OneRead},
		{name: "peer: the same read to a per-CPU map value", setup: nothing, mode: readbench.OneReadMap},
		{name: "process publishing nothing", outcome: 7, setup: nothing, mode: readbench.Read},
		{name: "OTEP record, 2 attributes (20 bytes)", outcome: 0, setup: publish(readbench.Record(1, route)), mode: readbench.Read},
		{name: "OTEP record, attributes at the bound (616 bytes)", outcome: 0, setup: publish(readbench.Record(1, full)), mode: readbench.Read},
		{name: "OTEP record, 2 attributes, another's last on the CPU", outcome: 0, setup: publish(readbench.Record(1, route)),
			mode: readbench.ReadAfter, before: readbench.Record(1, full)},
		{name: "OTEP record at the bound, another's last on the CPU", outcome: 0, setup: publish(readbench.Record(1, full)),
			mode: readbench.ReadAfter, before: readbench.Record(1, route)},
		{name: "OTEP slot null (no span)", outcome: 1, setup: func(r *readbench.Reader) error {
			err := r.Publish(readbench.Record(1, nil))
			r.Unpublish()
			return err
		}, mode: readbench.Read},
		{name: "Go labels, 2 (handler, tenant)", outcome: 4, setup: goLabels, labels: []string{"handler", "checkout", "tenant", "t-42"}, mode: readbench.Read},
		{name: "Go labels, 2, a value on the heap", outcome: 4, setup: goLabels,
			labels: []string{"handler", "checkout", "tenant", strings.Clone("t-42")}, mode: readbench.Read},
		{name: "Go labels, 8 of 41+30 bytes", outcome: 4, setup: goLabels, labels: long, mode: readbench.Read},
		{name: "Go labels, 2, another's last on the CPU", outcome: 4, setup: goLabels, labels: []string{"handler", "checkout", "tenant", "t-42"},
			mode: readbench.ReadAfter, before: readbench.Record(1, route)},
		{name: "Go labels, 2, registers saved entering the kernel", outcome: 4, setup: goLabels, labels: []string{"handler", "checkout", "tenant", "t-42"},
			mode: readbench.ReadSaved},
		{name: "Go goroutine without labels", outcome: 5, setup: goLabels, mode: readbench.Read},
	}
}

func runReadersSuite(ctx context.Context, e env) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := readbench.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	b, err := r.ReadGoLabels()
	if err != nil {
		return fmt.Errorf("this bench's Go labels: %w", err)
	}
	cases := readerCases()
	perRead := make([][]float64, len(cases)) // ns per read, one a round
	for round := range e.o.rounds {
		for _, i := range rotated(indexes(len(cases)), round) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ns, err := timeReaderCase(r, cases[i])
			if errors.Is(err, readbench.ErrNoThreadPointer) {
				ns = math.NaN() // no OTEP record on this thread: printed as n/a
				err = nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", cases[i].name, err)
			}
			perRead[i] = append(perRead[i], ns)
		}
	}
	fmt.Printf("readers suite: %d rounds of %d runs of %d reads on one thread; Go labels of this bench (%s, %s)\n",
		e.o.rounds, readerRunsPerRound, readbench.MaxReads, b.Release, runtime.GOARCH)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "case\tns/call (rounds' median, min-max)\tadded per sample\tx one read (peer)")
	loop := median(perRead[0])
	unit := median(perRead[1]) - loop
	for i, c := range cases {
		m := median(perRead[i])
		added, ratio := "-", "-"
		if math.IsNaN(m) {
			fmt.Fprintf(w, "%s\tn/a (%v)\t-\t-\n", c.name, readbench.ErrNoThreadPointer)
			continue
		}
		if i > 0 {
			added = fmt.Sprintf("%.0f ns", m-loop)
			ratio = fmt.Sprintf("%.1f", (m-loop)/unit)
		}
		fmt.Fprintf(w, "%s\t%.0f (%.0f-%.0f)\t%s\t%s\n", c.name, m, slices.Min(perRead[i]), slices.Max(perRead[i]), added, ratio)
	}
	return w.Flush()
}

// timeReaderCase sets c up and returns the median ns per read of its runs,
// checking that every run's reads found what c publishes.
func timeReaderCase(r *readbench.Reader, c readerCase) (float64, error) {
	r.Forget()
	r.Unpublish()
	var lastID int32
	if c.before != nil {
		if err := r.Publish(c.before); err != nil {
			return 0, err
		}
		res, err := r.Run(1, readbench.Read)
		if err != nil || res.AttrsId < 0 {
			return 0, fmt.Errorf("the record read before: attributes id %d, %v", res.AttrsId, err)
		}
		lastID = res.AttrsId
		r.Forget()
		r.Unpublish()
	}
	if err := c.setup(r); err != nil {
		return 0, err
	}
	var runs []float64
	var err error
	measure := func(context.Context) {
		for range readerRunsPerRound {
			var res readbench.Result
			if c.mode == readbench.ReadAfter {
				res, err = r.RunAfter(readbench.MaxReads, lastID)
			} else {
				res, err = r.Run(readbench.MaxReads, c.mode)
			}
			if err != nil {
				return
			}
			if res.Reads != readbench.MaxReads || ((c.mode == readbench.Read || c.mode == readbench.ReadAfter) && res.Outcome != c.outcome) {
				err = fmt.Errorf("a run made %d reads, the last found outcome %d, want %d, %d", res.Reads, res.Outcome, readbench.MaxReads, c.outcome)
				return
			}
			runs = append(runs, float64(res.Ns)/float64(res.Reads))
		}
	}
	if len(c.labels) > 0 {
		pprof.Do(context.Background(), pprof.Labels(c.labels...), measure)
	} else {
		measure(context.Background())
	}
	return median(runs), err
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
