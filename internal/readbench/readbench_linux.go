// Package readbench runs the samplers' thread-context and Go-label readers
// (bpf/threadctx.h, bpf/golabels.h) alone, on the calling thread, through
// BPF_PROG_TEST_RUN of bpf/readbench.bpf.c: it times them (the bench's
// readers suite) and shows what they read from memory the caller wrote
// (this package's tests). The calling process publishes what is read: an
// OTEP 4947 record through Publish, its goroutines' pprof labels through
// ReadGoLabels. Callers lock their goroutine to its thread.
package readbench

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/golabels"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/procfs"
	"github.com/bpfprofiler/bpfprofiler/internal/stackdrain"
	"github.com/bpfprofiler/bpfprofiler/internal/threadctx"
	"github.com/bpfprofiler/bpfprofiler/internal/unwinder"
)

// MaxReads is the most reads one Run makes (READBENCH_MAX_READS).
const MaxReads = 2048

// ErrNoThreadPointer is Publish's error on a thread without one (Go
// without cgo on arm64 keeps g in x28 and leaves TPIDR_EL0 zero): the
// readers find no OTEP record there, nor would an SDK publish one.
var ErrNoThreadPointer = errors.New("the calling thread has no thread pointer")

// Result is what one Run measured and what its last read found.
type Result = bpf.ReadbenchReadbenchResult

// objects are the program and the maps it uses; the object's other maps
// (the unwinder's, which golabels.h includes) are never created.
type objects struct {
	Run     *ebpf.Program `ebpf:"run_readbench"`
	Results *ebpf.Map     `ebpf:"readbench_results"`
	Procs   *ebpf.Map     `ebpf:"context_procs"`
	PIDs    *ebpf.Map     `ebpf:"context_pids"`
	Regs    *ebpf.Map     `ebpf:"readbench_regs"`
	Attrs   *ebpf.Map     `ebpf:"thread_ctx_attrs"`
}

// Reader is the loaded program, keyed by this process's pid.
type Reader struct {
	objs objects
	pid  uint32
	page []byte // the published slot and record (Publish), outside Go's heap; what OneRead reads
	// loc and labels (at bias) are what the readers take, as the loader
	// has them take a process's (nil: not read).
	loc    *threadctx.Location
	labels *golabels.Binary
	bias   uint64
}

// Open loads the program.
func Open() (*Reader, error) {
	_ = memlock.Raise() // BPF memory counts against RLIMIT_MEMLOCK before 5.11
	spec, err := bpf.LoadReadbench()
	if err != nil {
		return nil, err
	}
	if _, err := unwinder.Prepare(spec, nil); err != nil { // the kernel's features, as the samplers get them
		return nil, err
	}
	page, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	r := &Reader{pid: uint32(os.Getpid()), page: page}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		_ = unix.Munmap(page)
		return nil, fmt.Errorf("load readbench program: %w", err)
	}
	return r, nil
}

// Close releases the program, its maps and the published record.
func (r *Reader) Close() error {
	errs := []error{r.objs.Run.Close(), r.objs.Results.Close(), r.objs.Procs.Close(), r.objs.PIDs.Close(),
		r.objs.Regs.Close(), r.objs.Attrs.Close()}
	return errors.Join(append(errs, unix.Munmap(r.page))...)
}

// Mode is what a run calls in its loop.
type Mode uint64

const (
	Loop       Mode = iota // an empty function: the loop's own cost
	Read                   // the readers, as a CPU sample in user mode calls them (its registers at hand)
	OneRead                // one 8-byte bpf_probe_read_user to the stack
	OneReadMap             // the same read to a per-CPU map value
	ReadAfter              // Read after another context on the CPU (RunAfter)
	ReadSaved              // the readers taking the registers the thread saved entering the kernel, as off-CPU samples do
)

// Run calls mode's function reads times (at most MaxReads) on the calling
// thread.
func (r *Reader) Run(reads int, mode Mode) (Result, error) {
	return r.run(reads, mode, uint64(uintptr(unsafe.Pointer(&r.page[0]))))
}

// RunAfter is Run in mode ReadAfter: each read finds the CPU's last
// context to be the one stored under id (a Result's AttrsId or
// GoLabelsId), as when another thread ran on the CPU between two samples.
func (r *Reader) RunAfter(reads int, id int32) (Result, error) {
	return r.run(reads, ReadAfter, uint64(uint32(id)))
}

func (r *Reader) run(reads int, mode Mode, addr uint64) (Result, error) {
	var res Result
	if _, err := r.objs.Run.Run(&ebpf.RunOptions{Context: []uint64{uint64(r.pid), uint64(reads), uint64(mode), addr}}); err != nil {
		return res, fmt.Errorf("run readbench program: %w", err)
	}
	err := r.objs.Results.Lookup(uint32(0), &res)
	return res, err
}

// Publish makes record (an OTEP 4947 record: ids, valid, flags, the
// attributes' size and bytes) the calling thread's context: a slot the
// thread-context map locates from its thread pointer points at a copy.
func (r *Reader) Publish(record []byte) error {
	if len(record) > unix.Getpagesize()-64 {
		return fmt.Errorf("record of %d bytes: more than a page", len(record))
	}
	res, err := r.Run(1, Loop)
	if err != nil {
		return err
	}
	if res.ThreadPointer == 0 && canSetThreadPointer {
		// arm64 without cgo: the thread gets one, as libc gives a C
		// thread (its own page's address will do), which the kernel keeps
		// for the readers once it switches the thread out.
		setThreadPointer(uint64(uintptr(unsafe.Pointer(&r.page[0]))))
		time.Sleep(time.Millisecond)
		if res, err = r.Run(1, Loop); err != nil {
			return err
		}
	}
	if res.ThreadPointer == 0 {
		return ErrNoThreadPointer
	}
	base := uint64(uintptr(unsafe.Pointer(&r.page[0])))
	copy(r.page[64:], record)
	binary.NativeEndian.PutUint64(r.page, base+64)
	r.loc = &threadctx.Location{Offset: int64(base - res.ThreadPointer)} //nolint:gosec // wraps as the program adds it
	return r.put()
}

// put writes this process's entry as the loader writes a process's.
func (r *Reader) put() error {
	value := unwinder.ContextEntry(r.loc, r.labels, r.bias)
	return unwinder.PutContext(r.objs.Procs, r.objs.PIDs, r.pid, &value)
}

// Unpublish clears the slot: the thread runs no span.
func (r *Reader) Unpublish() {
	binary.NativeEndian.PutUint64(r.page, 0)
}

// ReadGoLabels has the readers take this Go executable's goroutine labels,
// as the loader has them take a Go process's; it returns what it read of
// the executable.
func (r *Reader) ReadGoLabels() (*golabels.Binary, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, err
	}
	b, err := golabels.Prepare(f, ef)
	if err != nil {
		return nil, err
	}
	if r.bias, err = ownBias(ef); err != nil {
		return nil, err
	}
	r.labels = b
	return b, r.put()
}

// ownBias returns where this process loaded its executable ef, as the
// loader finds a process's: from its executable mapping.
func ownBias(ef *elf.File) (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	maps, err := procfs.Default.ExecMaps(uint32(os.Getpid())) //nolint:gosec // a pid
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if m.Path == exe {
			return unwinder.MappedBias(ef, m)
		}
	}
	return 0, fmt.Errorf("no executable mapping of %s", exe)
}

// Forget removes this process's entry: the readers find nothing to read.
func (r *Reader) Forget() {
	r.loc, r.labels = nil, nil
	_ = unwinder.DeleteContext(r.objs.Procs, r.objs.PIDs, r.pid) // absent already: nothing to do
}

// Attributes returns the bytes stored under id in the attributes map
// (thread-context attributes, or Go labels as golabels.Decode takes them).
func (r *Reader) Attributes(id uint32) ([]byte, error) {
	words := make([]uint64, r.objs.Attrs.ValueSize()/8)
	if err := r.objs.Attrs.Lookup(&id, &words); err != nil {
		return nil, err
	}
	return stackdrain.UnpackAttrs(words), nil
}

// Record is an OTEP 4947 record of trace id 01..10, span id a1..a8, valid
// (1: valid), trace flags 1 and attrs, the record's attribute bytes.
func Record(valid byte, attrs []byte) []byte {
	rec := make([]byte, 28, 28+len(attrs))
	for i := range 16 {
		rec[i] = byte(i + 1)
	}
	for i := range 8 {
		rec[16+i] = byte(0xa1 + i)
	}
	rec[24], rec[25] = valid, 1
	binary.LittleEndian.PutUint16(rec[26:], uint16(len(attrs))) //nolint:gosec // tests' sizes are small
	return append(rec, attrs...)
}

// Attribute is one record attribute: key index, length, value (OTEP 4947).
func Attribute(key byte, value string) []byte { return append([]byte{key, byte(len(value))}, value...) }
