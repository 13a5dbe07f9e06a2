package allocs

import (
	"container/list"
	"math"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

// DefaultRate is runtime.MemProfileRate's default: the Go runtime samples
// about one allocation per this many bytes.
const DefaultRate = 512 * 1024

// maxRate bounds the rate Scale takes.
const maxRate = 1 << 30

// DefaultMaxLive bounds the sampled objects a Tracker keeps as live.
const DefaultMaxLive = 1 << 18

// Malloc is one allocation the runtime sampled: its object, size, and the
// allocating goroutine's stack (leaf first) and labels.
type Malloc struct {
	PID, TID uint32
	Comm     string
	Addr     uint64
	Size     uint64
	// Rate is the process's runtime.MemProfileRate when it sampled; 0:
	// unknown (DefaultRate is assumed). A native allocation's: the mean
	// weighted bytes between samples.
	Rate uint64
	// Weight, when not 0, is the bytes a native allocation stands for
	// (otel_memory:alloc's weighted_bytes; see ScaleWeighted).
	Weight uint64
	// Native: no garbage collector judges it, it is live from its
	// allocation to its free.
	Native bool
	Stack  []uint64
	Loss   capture.StackLoss
	Labels []byte // golabels.Decode's input; nil: none
}

// Tracker keeps the sampled objects that are live, by address, and hands
// over the four heap profiles of each report window. It is not safe for
// concurrent use.
type Tracker struct {
	maxLive int
	stacks  map[stackKey]*stackEntry
	objects map[objectKey]*liveObject
	live    *list.List        // *liveObject, oldest first
	cycles  map[uint32]uint64 // garbage collections (their mark terminations) seen, by process

	// Counters, since the Tracker was made.
	Mallocs        uint64 // sampled allocations
	Frees          uint64 // frees of a live sampled object
	UnmatchedFrees uint64 // frees of objects not known (allocated before the probes, or evicted)
	Replaced       uint64 // live objects whose address a new one took (their free was lost)
	Evicted        uint64 // live objects dropped to stay within maxLive
}

type objectKey struct {
	pid  uint32
	addr uint64
}

type stackKey struct {
	pid, tid uint32
	comm     string
	loss     capture.StackLoss
	stack    string // the addresses' bytes
	labels   string
}

// stackEntry is one distinct allocating stack with what it allocated in the
// window (scaled to estimates of all allocations) and how many of its
// sampled objects are live.
type stackEntry struct {
	key                      stackKey
	frames                   []capture.Frame
	labels                   []byte
	allocObjects, allocBytes float64 // this window
	liveCount                int
}

type liveObject struct {
	entry          *stackEntry
	key            objectKey
	objects, bytes float64
	cycle          uint64 // the process's garbage collections before its allocation
	native         bool   // live from its allocation (no collector)
	elem           *list.Element
}

// NewTracker returns a Tracker keeping at most maxLive live objects
// (DefaultMaxLive when 0).
func NewTracker(maxLive int) *Tracker {
	if maxLive <= 0 {
		maxLive = DefaultMaxLive
	}
	return &Tracker{
		maxLive: maxLive,
		stacks:  map[stackKey]*stackEntry{},
		objects: map[objectKey]*liveObject{},
		live:    list.New(),
		cycles:  map[uint32]uint64{},
	}
}

// Scale returns how many objects and bytes one sampled object of size
// stands for when the runtime samples one allocation per rate bytes on
// average (runtime/pprof's scaleHeapSample).
func Scale(size, rate uint64) (objects, bytes float64) {
	if size == 0 {
		return 0, 0
	}
	if rate <= 1 {
		return 1, float64(size)
	}
	// The rate is read from the process's memory: a value no runtime sets
	// (a rate of GiBs) would scale one sample to all but infinity.
	rate = min(rate, maxRate)
	s := 1 / (1 - math.Exp(-float64(size)/float64(rate)))
	return s, float64(size) * s
}

// ScaleWeighted returns how many objects and bytes one sampled event of
// a native allocator stands for: it announced weight bytes in objects of
// size, and the kernel side sampled it with probability
// p = 1 - exp(-weight/interval) (one sample per interval bytes on
// average), so it stands for weight/p bytes in weight/size/p objects.
func ScaleWeighted(size, weight, interval uint64) (objects, bytes float64) {
	if weight == 0 {
		return 0, 0
	}
	s := 1.0
	if interval > 1 {
		s = 1 / (1 - math.Exp(-float64(weight)/float64(interval)))
	}
	objects = s
	if size > 0 {
		objects = s * float64(weight) / float64(size)
	}
	return objects, float64(weight) * s
}

// Malloc notes a sampled allocation.
func (t *Tracker) Malloc(m Malloc) {
	rate := m.Rate
	if rate == 0 {
		rate = DefaultRate
	}
	objects, bytes := Scale(m.Size, rate)
	if m.Weight != 0 {
		objects, bytes = ScaleWeighted(m.Size, m.Weight, rate)
	}
	e := t.entry(m)
	e.allocObjects += objects
	e.allocBytes += bytes
	k := objectKey{m.PID, m.Addr}
	if old := t.objects[k]; old != nil {
		t.Replaced++
		t.release(old)
	}
	e.liveCount++
	o := &liveObject{entry: e, key: k, objects: objects, bytes: bytes, cycle: t.cycles[m.PID], native: m.Native}
	o.elem = t.live.PushBack(o)
	t.objects[k] = o
	t.Mallocs++
	for t.live.Len() > t.maxLive {
		t.Evicted++
		t.release(t.live.Front().Value.(*liveObject))
	}
}

// Free notes that the runtime swept the sampled object at addr.
func (t *Tracker) Free(pid uint32, addr uint64) {
	o := t.objects[objectKey{pid, addr}]
	if o == nil {
		t.UnmatchedFrees++
		return
	}
	t.Frees++
	t.release(o)
}

func (t *Tracker) release(o *liveObject) {
	delete(t.objects, o.key)
	t.live.Remove(o.elem)
	o.entry.liveCount--
}

// Cycle notes that a garbage collection of process pid ended its marking:
// the objects allocated before it that it did not free (once swept) are
// the process's live ones.
func (t *Tracker) Cycle(pid uint32) { t.cycles[pid]++ }

func (t *Tracker) entry(m Malloc) *stackEntry {
	b := make([]byte, 0, 8*len(m.Stack))
	for _, a := range m.Stack {
		b = append(b, byte(a), byte(a>>8), byte(a>>16), byte(a>>24), byte(a>>32), byte(a>>40), byte(a>>48), byte(a>>56))
	}
	k := stackKey{pid: m.PID, tid: m.TID, comm: m.Comm, loss: m.Loss, stack: string(b), labels: string(m.Labels)}
	if e, ok := t.stacks[k]; ok {
		return e
	}
	e := &stackEntry{key: k, frames: capture.StackFrames(nil, m.Stack), labels: m.Labels}
	t.stacks[k] = e
	return e
}

// Forget drops everything of process pid (it exited, or exec'ed).
func (t *Tracker) Forget(pid uint32) {
	for e := t.live.Front(); e != nil; {
		next := e.Next()
		if o := e.Value.(*liveObject); o.key.pid == pid {
			t.release(o)
		}
		e = next
	}
	for k := range t.stacks {
		if k.pid == pid {
			delete(t.stacks, k)
		}
	}
	delete(t.cycles, pid)
}

// PIDs returns the processes the Tracker holds anything of.
func (t *Tracker) PIDs() map[uint32]bool {
	out := map[uint32]bool{}
	for k := range t.stacks {
		out[k.pid] = true
	}
	return out
}

// Window is one report window's four heap profiles, as raw stacks whose
// values are estimates of all allocations (not only the sampled ones).
type Window struct {
	AllocObjects, AllocSpace, InuseObjects, InuseSpace []capture.RawStack
}

// Live returns the live sampled objects the Tracker holds.
func (t *Tracker) Live() int { return t.live.Len() }

// Drain returns the window's allocations since the last Drain and what is
// live now, and starts the next window. Live is as the runtime's own heap
// profile has it: objects allocated before the process's last garbage
// collection and not freed since; newer ones are not judged yet. Native
// objects are live until freed.
func (t *Tracker) Drain() Window {
	type sums struct{ objects, bytes float64 }
	inuse := map[*stackEntry]*sums{}
	for e := t.live.Front(); e != nil; e = e.Next() {
		o := e.Value.(*liveObject)
		if !o.native && o.cycle >= t.cycles[o.key.pid] {
			continue
		}
		s := inuse[o.entry]
		if s == nil {
			s = &sums{}
			inuse[o.entry] = s
		}
		s.objects += o.objects
		s.bytes += o.bytes
	}
	var w Window
	// A label set's id is its bytes' within one report (the assembler
	// decodes each id once).
	labelIDs := map[string]uint32{}
	for k, e := range t.stacks {
		raw := func(v float64) capture.RawStack {
			s := capture.RawStack{PID: k.pid, TID: k.tid, Comm: k.comm, Frames: e.frames, Value: value(v), UserLoss: k.loss}
			if e.labels != nil {
				id, ok := labelIDs[k.labels]
				if !ok {
					id = uint32(len(labelIDs))
					labelIDs[k.labels] = id
				}
				s.GoLabels = &capture.GoLabels{Data: e.labels, ID: id}
			}
			return s
		}
		if e.allocObjects > 0 {
			w.AllocObjects = append(w.AllocObjects, raw(e.allocObjects))
			w.AllocSpace = append(w.AllocSpace, raw(e.allocBytes))
		}
		if s := inuse[e]; s != nil {
			w.InuseObjects = append(w.InuseObjects, raw(s.objects))
			w.InuseSpace = append(w.InuseSpace, raw(s.bytes))
		}
		e.allocObjects, e.allocBytes = 0, 0
		if e.liveCount == 0 {
			delete(t.stacks, k)
		}
	}
	return w
}

// value rounds an estimate to a sample value, within what a profile's
// int64 values hold (sizes are the process's to report).
func value(v float64) uint64 {
	if !(v < math.MaxInt64) { // NaN too
		return math.MaxInt64
	}
	return uint64(math.Round(v))
}
