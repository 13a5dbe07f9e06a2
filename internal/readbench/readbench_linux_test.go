package readbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// The readers' outcomes (enum thread_ctx_outcome).
const (
	linked, none, invalid, goFound, goNone, unpublished = 0, 1, 2, 4, 5, 7
)

// TestReadersReadWhatTheThreadPublishes runs the samplers' readers on this
// thread (BPF_PROG_TEST_RUN) against records and labels it set: each
// outcome, the ids and attribute bytes stored, the bounds.
func TestReadersReadWhatTheThreadPublishes(t *testing.T) {
	testutil.RequireBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := openReader(t)

	route := append(Attribute(0, "/api/checkout"), Attribute(1, "GET")...)
	long := bytes.Repeat(Attribute(2, strings.Repeat("v", 98)), 7) // 700 bytes: cut at 616
	manyLabels := []string{}
	for i := range 9 {
		manyLabels = append(manyLabels, "k"+string(rune('0'+i)), "v")
	}
	heapValue := strings.Clone("t-42") // on the heap: copied, not referenced
	tests := []struct {
		name      string
		record    []byte // published unless nil; unpublished when empty
		labels    []string
		outcome   uint32
		attrs     []byte // the attribute bytes stored, for linked
		goLabels  map[string]string
		refs      int // strings stored by reference (literals), when the executable is not position independent
		truncated uint32
	}{
		{name: "nothing published", outcome: unpublished},
		{name: "valid record", record: Record(1, route), outcome: linked, attrs: route},
		{name: "valid record without attributes", record: Record(1, nil), outcome: linked},
		{name: "invalid record", record: Record(0, route), outcome: invalid},
		{name: "null slot", record: []byte{}, outcome: none},
		{name: "attributes cut", record: Record(1, long), outcome: linked, attrs: long[:616], truncated: 1},
		{name: "go labels", labels: []string{"handler", "checkout", "tenant", "t-42"}, outcome: goFound,
			goLabels: map[string]string{"handler": "checkout", "tenant": "t-42"}, refs: 4},
		{name: "go labels, a value on the heap", labels: []string{"handler", "checkout", "tenant", heapValue}, outcome: goFound,
			goLabels: map[string]string{"handler": "checkout", "tenant": "t-42"}, refs: 3},
		{name: "go without labels", labels: []string{}, outcome: goNone},
		{name: "a record and go labels: the record", record: Record(1, route), labels: []string{"handler", "checkout"},
			outcome: linked, attrs: route},
		{name: "go labels cut at 8", labels: manyLabels, outcome: goFound, truncated: 1, refs: -1,
			goLabels: map[string]string{"k0": "v", "k1": "v", "k2": "v", "k3": "v", "k4": "v", "k5": "v", "k6": "v", "k7": "v"}},
	}
	where, skipped := "?", 0
	var bin *golabels.Binary
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A subtest is a goroutine of its own: the record published is
			// this thread's, and the reads must run on it.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r.Forget()
			r.Unpublish()
			if tt.record != nil {
				rec := tt.record
				if len(rec) == 0 {
					rec = Record(1, nil) // then unpublished: a null slot
				}
				err := r.Publish(rec)
				if errors.Is(err, ErrNoThreadPointer) {
					skipped++
					t.Skip(err) // the Go cases still run: this thread's g is in x28
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(tt.record) == 0 {
					r.Unpublish()
				}
			}
			if tt.labels != nil {
				b, err := r.ReadGoLabels()
				if err != nil {
					t.Fatal(err)
				}
				bin = b
				where = fmt.Sprintf("g at TLS %d", b.TLSOffset)
				if b.GRegister {
					where = "g in x28"
				}
			}
			// The registers at hand (a CPU sample in user mode), then as
			// saved entering the kernel (off-CPU): the same answer.
			var res, saved Result
			var err error
			run := func(context.Context) {
				if res, err = r.Run(3, Read); err == nil {
					saved, err = r.Run(3, ReadSaved)
				}
			}
			if len(tt.labels) > 0 {
				pprof.Do(context.Background(), pprof.Labels(tt.labels...), run)
			} else {
				run(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Reads != 3 || res.Outcome != tt.outcome || res.Truncated != tt.truncated || res.Lost != 0 {
				t.Fatalf("reads %d outcome %d truncated %d lost %d, want 3, %d, %d, 0", res.Reads, res.Outcome,
					res.Truncated, res.Lost, tt.outcome, tt.truncated)
			}
			if saved.Outcome != res.Outcome || saved.AttrsId != res.AttrsId || saved.GoLabelsId != res.GoLabelsId ||
				saved.Truncated != res.Truncated || saved.Lost != res.Lost {
				t.Errorf("with the saved registers: outcome %d, ids %d %d, truncated %d, lost %d; at hand: %d, %d %d, %d, %d",
					saved.Outcome, saved.AttrsId, saved.GoLabelsId, saved.Truncated, saved.Lost,
					res.Outcome, res.AttrsId, res.GoLabelsId, res.Truncated, res.Lost)
			}
			wantIDs := tt.outcome == linked
			if gotIDs := res.TraceId[0] == 1 && res.TraceId[15] == 16 && res.SpanId[7] == 0xa8; gotIDs != wantIDs {
				t.Errorf("ids %x %x, want them: %v", res.TraceId, res.SpanId, wantIDs)
			}
			if tt.attrs != nil {
				got, err := r.Attributes(uint32(res.AttrsId)) //nolint:gosec // an id is a hash
				if err != nil || !bytes.Equal(got, tt.attrs) {
					t.Errorf("attributes %q (%v), want %q", got, err, tt.attrs)
				}
			} else if res.AttrsId != -1 {
				t.Errorf("attributes id %d, want none", res.AttrsId)
			}
			if tt.goLabels == nil {
				if res.GoLabelsId != 0 {
					t.Errorf("go labels id %d, want none", res.GoLabelsId)
				}
				return
			}
			raw, err := r.Attributes(res.GoLabelsId)
			if err != nil {
				t.Fatal(err)
			}
			refs := 0 // the strings Decode reads by reference
			lo, hi := bin.StringsAt(r.bias)
			read := ownStrings(t, lo, hi)
			counted := func(addr uint64, n int) ([]byte, bool) { refs++; return read(addr, n) }
			if got, dropped := golabels.Decode(raw, counted); !maps.Equal(got, tt.goLabels) || dropped != 0 {
				t.Errorf("go labels %v (%d dropped), want %v", got, dropped, tt.goLabels)
			}
			want := tt.refs
			if hi == 0 {
				want = 0 // no literals known: every string copied
			}
			if tt.refs >= 0 && refs != want {
				t.Errorf("%d strings by reference, want %d (read-only segment %#x-%#x)", refs, want, lo, hi)
			}
		})
	}
	if bin != nil {
		where += fmt.Sprintf(", literals by reference: %v", bin.StringsHi != 0)
	}
	if skipped > 0 { // arm64 without cgo
		where += fmt.Sprintf(", %d OTEP cases n/a: no thread pointer", skipped)
	}
	t.Logf("matrix: %d cases, %s", len(tests)-skipped, where)
}

// ownStrings reads this process's strings in its executable's read-only
// segment, at lo to hi, as the symbolizer reads a sampled process's from
// its executable.
func ownStrings(t *testing.T, lo, hi uint64) golabels.ReadString {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return func(addr uint64, n int) ([]byte, bool) {
		if addr < lo || addr+uint64(n) > hi { //nolint:gosec // n is a byte
			return nil, false
		}
		buf := make([]byte, n)
		_, err := mem.ReadAt(buf, int64(addr)) //nolint:gosec // below 1<<48
		return buf, err == nil
	}
}

// TestReadersDropAReplacedID: a CPU compares a thread's words with its
// copy of those it stored last, and with the map every 16th read. When the
// map holds other words under that id (evicted, then another record's of
// the same hash), that read finds it, and no read after gives the id until
// the words are stored again.
func TestReadersDropAReplacedID(t *testing.T) {
	testutil.RequireBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	for c := range 1024 { // every run on one CPU (the first allowed): its copy is the one compared
		if was.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &was) //nolint:errcheck // the thread is unlocked after
	r := openReader(t)
	publishOrSkip(t, r, Record(1, Attribute(0, "/api/checkout")))
	res, err := r.Run(1, Read)
	if err != nil || res.Outcome != linked || res.AttrsId < 0 {
		t.Fatalf("outcome %d, attributes id %d (%v); want linked with an id", res.Outcome, res.AttrsId, err)
	}
	id := uint32(res.AttrsId)
	other := make([]uint64, r.objs.Attrs.ValueSize()/8)
	other[0], other[1] = 1<<63|3, 0x636261 // "abc": a colliding record's
	if err := r.objs.Attrs.Put(id, other); err != nil {
		t.Fatal(err)
	}
	if res, err = r.Run(20, Read); err != nil || res.Reads != 20 || res.AttrsId != -1 || res.Lost != 1 {
		t.Errorf("the 20th read after the words changed: %d reads, id %d, lost %d (%v); want no id, lost",
			res.Reads, res.AttrsId, res.Lost, err)
	}
	if err := r.objs.Attrs.Delete(id); err != nil {
		t.Fatal(err)
	}
	if res, err = r.Run(20, Read); err != nil || res.AttrsId != int32(id) || res.Lost != 0 { //nolint:gosec // an id is below 2^31
		t.Errorf("after the map let them go: id %d, lost %d (%v); want %d again", res.AttrsId, res.Lost, err, id)
	}
}

// TestReadersLookUpOnlyProcessesWithTheirBit: the readers look a process
// up only when its bit in context_pids is set, which PutContext sets and
// DeleteContext clears; an entry without its bit is not read (what makes
// a process that publishes nothing cost no lookup).
func TestReadersLookUpOnlyProcessesWithTheirBit(t *testing.T) {
	testutil.RequireBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := openReader(t)
	publishOrSkip(t, r, Record(1, nil))
	word, bit := r.pid/64, uint64(1)<<(r.pid%64)
	bits := func() uint64 {
		var w uint64
		if err := r.objs.PIDs.Lookup(word, &w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	outcome := func() uint32 {
		res, err := r.Run(1, Read)
		if err != nil {
			t.Fatal(err)
		}
		return res.Outcome
	}
	if bits() != bit || outcome() != linked {
		t.Fatalf("published: word %#x, outcome %d; want %#x (this pid's bit alone), linked", bits(), outcome(), bit)
	}
	if err := r.objs.PIDs.Put(word, uint64(0)); err != nil {
		t.Fatal(err)
	}
	if got := outcome(); got != unpublished {
		t.Errorf("the entry without its bit: outcome %d, want %d (not looked up)", got, unpublished)
	}
	if err := r.put(); err != nil {
		t.Fatal(err)
	}
	r.Forget()
	if bits() != 0 || outcome() != unpublished {
		t.Errorf("forgotten: word %#x, outcome %d; want 0, %d", bits(), outcome(), unpublished)
	}
}

// openReader loads the readers' program, closed when t ends.
func openReader(t *testing.T) *Reader {
	t.Helper()
	r, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// publishOrSkip publishes record as the calling thread's context; a thread
// without a thread pointer (arm64 without cgo: no SDK could publish one
// there) skips the test.
func publishOrSkip(t *testing.T, r *Reader, record []byte) {
	t.Helper()
	if err := r.Publish(record); errors.Is(err, ErrNoThreadPointer) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
}
