package php

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// Why a walk ended (enum runtime_end, bpf/common.h).
const (
	endRoot      = 0
	endNoThread  = 1
	endReadFault = 2
	endDepth     = 3
)

// maxStackDepth is MAX_STACK_DEPTH (bpf/common.h): the words of a walk.
const maxStackDepth = 127

// loadWalker loads bpf/phpwalk.bpf.c and logs what the verifier processed
// of each program.
func loadWalker(t *testing.T) *bpf.PhpwalkObjects {
	testutil.RequireBPF(t)
	_ = memlock.Raise() // BPF memory counts against RLIMIT_MEMLOCK before 5.11
	spec, err := bpf.LoadPhpwalk()
	require.NoError(t, err)
	var objs bpf.PhpwalkObjects
	opts := &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}
	require.NoError(t, spec.LoadAndAssign(&objs, opts), "load phpwalk")
	t.Cleanup(func() { objs.Close() })
	processed := regexp.MustCompile(`processed \d+ insns[^\n]*`)
	t.Logf("verifier: sample_php %s; run_php_walk %s", processed.FindString(objs.SamplePhp.VerifierLog),
		processed.FindString(objs.RunPhpWalk.VerifierLog))
	return &objs
}

// TestWalkerProcIsPhpProc checks that WalkerProc's bytes are bpf/php.h's
// php_proc, field by field.
func TestWalkerProcIsPhpProc(t *testing.T) {
	in := &Interpreter{ExecutorGlobals: 0x1000, ExecuteExStart: 0x2000, ExecuteExEnd: 0x3000, Layout: layouts["8.4"]}
	b, err := in.WalkerProc(nil, 0x10000)
	require.NoError(t, err)
	require.Len(t, b, binary.Size(bpf.PhpwalkPhpProc{}))
	var got bpf.PhpwalkPhpProc
	_, err = binary.Decode(b, binary.NativeEndian, &got)
	require.NoError(t, err)
	l := &in.Layout
	require.Equal(t, bpf.PhpwalkPhpProc{
		ExecutorGlobals: 0x11000, ExecuteExStart: 0x12000, ExecuteExEnd: 0x13000,
		CurrentExecuteData: l.CurrentExecuteData, ExecuteDataOpline: l.ExecuteDataOpline,
		ExecuteDataFunc: l.ExecuteDataFunc, ExecuteDataCallInfo: l.ExecuteDataCallInfo,
		ExecuteDataPrev: l.ExecuteDataPrev, FunctionType: l.FunctionType, OpArrayLast: l.OpArrayLast,
		OpArrayOpcodes: l.OpArrayOpcodes, OpSize: l.OpSize, OpArrayFilename: l.OpArrayFilename,
		OpLineno: l.OpLineno,
	}, got)
	in.ExecuteExStart, in.ExecuteExEnd = 0, 0
	b, err = in.WalkerProc(nil, 0x10000)
	require.NoError(t, err)
	_, err = binary.Decode(b, binary.NativeEndian, &got)
	require.NoError(t, err)
	require.Zero(t, got.ExecuteExStart+got.ExecuteExEnd, "no execute_ex: no range")
}

// chainsPerVersion is how many random chains TestBPFWalkMatchesWalk walks
// per version.
const chainsPerVersion = 400

// TestBPFWalkMatchesWalk builds random execute_data chains in the test's
// own memory, for each version's layout, and walks each with the BPF
// walker (run_php_walk, BPF_PROG_TEST_RUN) and with Walk: the words and
// why each walk ended must be the same. The chains hold every case the
// walk decides: user, eval, internal and unknown functions; oplines among
// the ops, past them, before them, misaligned, NULL, beyond the 15 bits of
// a word; entry frames; reads that fault (a PROT_NONE page: execute_data,
// zend_function, op_array, executor_globals); NULL current_execute_data;
// chains of MAX_STACK_DEPTH frames and around it, and cycles; the
// innermost opline from the VM's register when the pc is in execute_ex.
func TestBPFWalkMatchesWalk(t *testing.T) {
	objs := loadWalker(t)
	a := newArena(t)
	ends := map[int32]int{}
	for vi, v := range testutil.PHPVersions {
		t.Run(v, func(t *testing.T) {
			l := layouts[v]
			rng := rand.New(rand.NewPCG(1, uint64(vi)))
			ambiguous := 0
			for i := range chainsPerVersion {
				c := randomChain(rng, a, &l)
				wantWords, wantEnd := c.reference(t, a, &l)
				gotWords, gotEnd := c.runBPF(t, objs, a, &l)
				if a.outside && (wantEnd != gotEnd || !slices.Equal(wantWords, gotWords)) {
					ambiguous++ // see arena.outside
					t.Logf("chain %d (%s) read beyond the arena, and the walks differ", i, c)
					continue
				}
				require.Equal(t, wantEnd, gotEnd, "chain %d (%s): end", i, c)
				require.Equal(t, wantWords, gotWords, "chain %d (%s): words", i, c)
				ends[gotEnd]++
			}
			require.LessOrEqual(t, ambiguous, chainsPerVersion/50, "chains whose walks differ beyond the arena")
		})
	}
	t.Logf("ends of the walks by enum runtime_end: %v", ends)
	for _, end := range []int32{endRoot, endNoThread, endReadFault, endDepth} {
		require.NotZero(t, ends[end], "no walk ended %d", end)
	}
}

// arena is memory of the test's process that both walks read: Walk
// through ReadAt, the BPF walker through bpf_probe_read_user (the test run
// runs in this process). Its last page is PROT_NONE: reads there fault.
type arena struct {
	mem   []byte
	base  uint64
	guard uint64 // the PROT_NONE page's address
	used  int
	// outside: ReadAt read memory beyond the arena (an opline far past
	// its ops, in another mapping) since the last reset. Whether BPF
	// reads it too depends on its page's state (bpf_probe_read_user
	// faults nothing in; process_vm_readv does): a chain whose walks
	// then differ is counted, not failed, up to 2% of them.
	outside bool
}

const (
	arenaSize = 1 << 20
	pageSize  = 4096
)

func newArena(t *testing.T) *arena {
	// Populated: bpf_probe_read_user does not fault pages in, so a page
	// never touched would read for Walk only.
	mem, err := unix.Mmap(-1, 0, arenaSize+pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	require.NoError(t, err)
	for i := 0; i < arenaSize; i += pageSize {
		mem[i] = 0
	}
	t.Cleanup(func() { require.NoError(t, unix.Munmap(mem)) })
	require.NoError(t, unix.Mprotect(mem[arenaSize:], unix.PROT_NONE))
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	return &arena{mem: mem, base: base, guard: base + arenaSize}
}

// reset frees all; the memory used is zeroed.
func (a *arena) reset() {
	clear(a.mem[:a.used])
	a.used = 0
	a.outside = false
}

// alloc returns the address of n bytes of random content, 8-aligned.
func (a *arena) alloc(rng *rand.Rand, n int) uint64 {
	a.used = (a.used + 7) &^ 7
	// Room for the blocks at the guard page (nearGuard) below it.
	if a.used+n > arenaSize-pageSize {
		panic("arena full")
	}
	for i := range n {
		a.mem[a.used+i] = byte(rng.Uint32())
	}
	addr := a.base + uint64(a.used)
	a.used += n
	return addr
}

// bytesAt is the arena's memory at addr (in it).
func (a *arena) bytesAt(addr uint64) []byte { return a.mem[addr-a.base : arenaSize] }

var errFault = errors.New("fault")

// ReadAt reads the test process's memory as bpf_probe_read_user does (the
// arena's PROT_NONE page and unmapped addresses fault; an opline far past
// its ops may land in another mapping, which reads).
func (a *arena) ReadAt(p []byte, off int64) (int, error) {
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(off), Len: len(p)}}
	n, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
	if err != nil || n < len(p) {
		return 0, errFault
	}
	if uint64(off) < a.base || uint64(off)+uint64(len(p)) > a.guard {
		a.outside = true
	}
	return n, nil
}

// chain is one random walk's input: the process (executor_globals, the
// VM's range), the pc and the opline register.
type chain struct {
	proc       Interpreter
	pc, vmReg  uint64
	frames     int
	tail, kind string
}

func (c *chain) String() string {
	return fmt.Sprintf("%d frames, %s, ends %s, pc %#x in [%#x, %#x), register %#x", c.frames, c.kind, c.tail,
		c.pc, c.proc.ExecuteExStart, c.proc.ExecuteExEnd, c.vmReg)
}

// randomChain builds a random chain in a (reset first) for layout l.
func randomChain(rng *rand.Rand, a *arena, l *Layout) *chain {
	a.reset()
	put64 := func(addr, v uint64) { binary.LittleEndian.PutUint64(a.bytesAt(addr), v) }
	put32 := func(addr uint64, v uint32) { binary.LittleEndian.PutUint32(a.bytesAt(addr), v) }

	// Functions: mostly user code; some ops past the 15 bits of a word.
	type function struct {
		addr, opcodes uint64
		last          uint32
	}
	newFunction := func(at uint64) function {
		types := []byte{userFunction, userFunction, userFunction, evalCode, internalFunction, 0, 3}
		lasts := []uint32{0, 1, 7, 300, 70000}
		f := function{addr: at, opcodes: a.base + uint64(rng.IntN(1<<14))*32, last: lasts[rng.IntN(len(lasts))]}
		if rng.IntN(8) == 0 {
			f.opcodes += 8 // misaligned ops: no opline is one of them
		}
		a.bytesAt(at)[l.FunctionType] = types[rng.IntN(len(types))]
		put32(at+uint64(l.OpArrayLast), f.last)
		put64(at+uint64(l.OpArrayOpcodes), f.opcodes)
		return f
	}
	var fns []function
	for range 1 + rng.IntN(6) {
		fns = append(fns, newFunction(a.alloc(rng, int(l.FunctionSize))))
	}
	// Functions whose reads fault: at NULL, in the PROT_NONE page, one
	// whose type is readable but not its ops' count, one whose ops'
	// count is but not its ops.
	faulting := []uint64{0, a.guard, a.guard - 8, a.guard - uint64(l.OpArrayOpcodes) - 4}
	for _, at := range faulting[2:] {
		for i := at; i < a.guard; i++ {
			a.mem[i-a.base] = 0
		}
		a.bytesAt(at)[l.FunctionType] = userFunction
		if at+uint64(l.OpArrayLast)+4 <= a.guard {
			put32(at+uint64(l.OpArrayLast), 5)
		}
	}
	oplineOf := func(f function) uint64 {
		switch rng.IntN(10) {
		case 0:
			return 0
		case 1:
			return f.opcodes - uint64(l.OpSize)
		case 2:
			return f.opcodes + uint64(f.last)*uint64(l.OpSize) // just past the last
		case 3:
			return f.opcodes + 8
		case 4:
			return rng.Uint64()
		default:
			return f.opcodes + uint64(rng.IntN(int(f.last)+1))*uint64(l.OpSize)
		}
	}

	c := &chain{kind: "chain"}
	egSize := int(l.CurrentExecuteData) + 8
	eg := a.alloc(rng, egSize)
	c.proc = Interpreter{ExecutorGlobals: eg, Layout: *l}
	if rng.IntN(5) > 0 {
		c.proc.ExecuteExStart, c.proc.ExecuteExEnd = 0x400000, 0x500000
	}
	c.pc = 0x3ff000 + uint64(rng.IntN(0x102000))
	switch rng.IntN(20) {
	case 0:
		c.kind, c.proc.ExecutorGlobals = "executor_globals faults", a.guard-uint64(l.CurrentExecuteData)
	case 1:
		c.kind, c.tail = "no current_execute_data", "none"
		put64(eg+uint64(l.CurrentExecuteData), 0)
		return c
	}

	switch rng.IntN(10) {
	case 0:
		c.frames = maxStackDepth - 2 + rng.IntN(5)
	case 1:
		c.frames = 140 + rng.IntN(40)
	default:
		c.frames = 1 + rng.IntN(12)
	}
	eds := make([]uint64, c.frames)
	for i := range eds {
		eds[i] = a.alloc(rng, executeDataSize)
	}
	for i, ed := range eds {
		f := fns[rng.IntN(len(fns))]
		fn := f.addr
		if rng.IntN(40) == 0 {
			fn = faulting[rng.IntN(len(faulting))]
			f = function{addr: fn}
		}
		put64(ed+uint64(l.ExecuteDataOpline), oplineOf(f))
		put64(ed+uint64(l.ExecuteDataFunc), fn)
		callInfo := rng.Uint32() &^ callTop
		if rng.IntN(3) == 0 {
			callInfo |= callTop
		}
		put32(ed+uint64(l.ExecuteDataCallInfo), callInfo)
		prev := uint64(0)
		if i+1 < len(eds) {
			prev = eds[i+1]
		}
		put64(ed+uint64(l.ExecuteDataPrev), prev)
		if i == 0 {
			c.vmReg = oplineOf(f)
		}
	}
	c.tail = "NULL"
	last := eds[len(eds)-1] + uint64(l.ExecuteDataPrev)
	switch rng.IntN(6) {
	case 0:
		c.tail = "in the PROT_NONE page"
		put64(last, a.guard+uint64(rng.IntN(64)))
	case 1:
		c.tail = "across the PROT_NONE page"
		put64(last, a.guard-executeDataSize+8)
	case 2:
		c.tail = "a cycle"
		put64(last, eds[rng.IntN(len(eds))])
	}
	put64(eg+uint64(l.CurrentExecuteData), eds[0])
	return c
}

// reference is what the BPF walk must give for c: Walk's frames as words
// (the innermost's opline from the register when the pc is in
// execute_ex) and why it ended.
func (c *chain) reference(t *testing.T, a *arena, l *Layout) ([]uint64, int32) {
	var innermost *uint64
	if c.pc >= c.proc.ExecuteExStart && c.pc < c.proc.ExecuteExEnd {
		innermost = &c.vmReg
	}
	frames, err := l.walk(a, c.proc.ExecutorGlobals, maxStackDepth, innermost)
	end := int32(endRoot)
	switch {
	case err != nil:
		end = endReadFault
	case len(frames) == 0:
		end = endNoThread
	case len(frames) == maxStackDepth:
		// The walk stops at MAX_STACK_DEPTH frames: cut, unless the
		// next is NULL.
		more, err := l.walk(a, c.proc.ExecutorGlobals, maxStackDepth+1, innermost)
		if err != nil || len(more) > maxStackDepth {
			end = endDepth
		}
	}
	words := make([]uint64, len(frames))
	for i, f := range frames {
		words[i] = f.Word()
	}
	return words, end
}

// runBPF walks c with run_php_walk.
func (c *chain) runBPF(t *testing.T, objs *bpf.PhpwalkObjects, a *arena, l *Layout) ([]uint64, int32) {
	b, err := c.proc.WalkerProc(nil, 0)
	require.NoError(t, err)
	in := bpf.PhpwalkPhpWalkInput{Pc: c.pc, VmReg: c.vmReg}
	_, err = binary.Decode(b, binary.NativeEndian, &in.Proc)
	require.NoError(t, err)
	require.NoError(t, objs.WalkInput.Put(uint32(0), &in))
	_, err = objs.RunPhpWalk.Run(&ebpf.RunOptions{})
	require.NoError(t, err, "run run_php_walk")
	var out bpf.PhpwalkPhpWalkRecord
	require.NoError(t, objs.WalkOutput.Lookup(uint32(0), &out))
	require.LessOrEqual(t, out.N, uint32(maxStackDepth))
	if out.N < maxStackDepth {
		require.Zero(t, out.Frames[out.N], "the words end with 0")
	}
	words := append([]uint64{}, out.Frames[:out.N]...)
	return words, out.End
}
