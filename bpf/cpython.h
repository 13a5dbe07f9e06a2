/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * CPython frames of the current thread, read from the interpreter's own
 * structures (no flag in the profiled program).
 *
 * The walker of the CPython runtime (internal/runtimes/cpython). User space
 * recognises a CPython interpreter among a process's mappings when the
 * process is announced (internal/unwinder asks internal/runtimes) and fills
 * python_procs[pid] with the address of its _PyRuntime and the struct
 * offsets of its version. The walk then:
 * 1. finds the thread's PyThreadState in the main interpreter's thread list
 *    by its thread_id, which is pthread_self(), found from the thread
 *    pointer (arch.h: the fs base on x86-64, tpidr_el0 on arm64);
 * 2. follows the frame chain from the thread's current frame, writing one
 *    word per Python frame, leaf first: the code object's address, the
 *    instruction the frame is at (code units, clamped), and a flag on the
 *    outermost frame of each call of the native _PyEval_EvalFrameDefault
 *    (user space puts each such run of Python frames where the native walk
 *    met that function).
 * It is entered through apart.h, which stores the frames by content in the
 * stacks map like any stack; the key's runtime_stack_id names them.
 */
#ifndef BPFPROFILER_CPYTHON_H
#define BPFPROFILER_CPYTHON_H

#include "common.h"
#include "arch.h"

/* cpython.InstructionKind: how the frame gives its instruction. */
enum python_instruction {
	PY_INSTR_BYTE_OFFSET = 0, /* 3.9: f_lasti, a byte offset */
	PY_INSTR_INDEX = 1,	  /* 3.10: f_lasti, an index in code units */
	PY_INSTR_POINTER = 2,	  /* 3.11+: a pointer into the code object's bytecode */
};

/* cpython.EntryKind: where one eval call's run of frames ends. */
enum python_entry {
	PY_ENTRY_EVERY_FRAME = 0, /* 3.9/3.10: each frame is its own eval call */
	PY_ENTRY_FLAG = 1,	  /* 3.11: is_entry marks the outermost frame of a call */
	PY_ENTRY_SHIM = 2,	  /* 3.12+: a frame owned by the C stack is the call's shim */
};

/* _PyInterpreterFrame.owner of a shim frame (FRAME_OWNED_BY_CSTACK in
 * 3.12/3.13, FRAME_OWNED_BY_INTERPRETER from 3.14: 3 in all). */
#define PY_OWNED_BY_CSTACK 3

/* A _PyStackRef's tag (3.14+); objects are at least 8-byte aligned. */
#define PY_STACKREF_TAG_BITS 7ULL

/*
 * A Python frame word (capture.RuntimeFrames): code address | instruction
 * << 48 | eval entry. 48 address bits: arm64's user addresses have them.
 */
#define PY_FRAME_ADDR_BITS 48
#define PY_FRAME_ADDR_MASK ((1ULL << PY_FRAME_ADDR_BITS) - 1)
#define PY_FRAME_INSTR_MAX 0x7fffULL
#define PY_FRAME_EVAL_ENTRY (1ULL << 63)

/* Threads searched for the current one (once per thread, see
 * python_threads); Python frames kept per stack. */
#define PY_MAX_THREADS 1024
#define PY_MAX_FRAMES 96

/* One interpreter process (cpython.Interpreter.WalkerProc; see cpython.Offsets). */
struct python_proc {
	u64 runtime; /* address of _PyRuntime */
	u32 interpreters_head;
	u32 threads_head;
	u32 thread_next;
	u32 thread_id;
	u32 thread_frame;
	u32 cframe_current_frame;
	u32 frame_previous;
	u32 frame_code;
	u32 frame_instruction;
	u32 frame_owner;
	u32 code_adaptive;
	/* Free-threaded builds: where a frame's copy of the bytecode is. */
	u32 frame_tlbc_index; /* _PyInterpreterFrame.tlbc_index (int32) */
	u32 code_tlbc;	      /* PyCodeObject.co_tlbc (_PyCodeArray *); 0: not free-threaded */
	u8 via_cframe;	      /* thread_frame points at a _PyCFrame (3.11/3.12) */
	u8 instruction_kind;
	u8 entry_kind;
	u8 reserved;
};

/* pid (as the collector sees it) -> its interpreter. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct python_proc);
} python_procs SEC(".maps");

static __always_inline int py_read(void *dst, u32 size, u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

/*
 * Host tid -> its PyThreadState, found once by a walk of the thread list
 * and checked at every use (its thread_id must still be the thread's fs
 * base): a process with hundreds of threads costs one read per sample.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} python_threads SEC(".maps");

/* The PyThreadState of the current thread (thread pointer tp), or 0. */
static __always_inline u64 python_thread_state(const struct python_proc *p, u64 tp)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 interp = 0, ts = 0, id = 0, *cached;

	cached = bpf_map_lookup_elem(&python_threads, &tid);
	if (cached && !py_read(&id, sizeof(id), *cached + p->thread_id) && pthread_of(id, tp))
		return *cached;
	if (py_read(&interp, sizeof(interp), p->runtime + p->interpreters_head) || !interp ||
	    py_read(&ts, sizeof(ts), interp + p->threads_head))
		return 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < PY_MAX_THREADS && ts; i++) {
		if (py_read(&id, sizeof(id), ts + p->thread_id))
			return 0;
		if (pthread_of(id, tp)) {
			bpf_map_update_elem(&python_threads, &tid, &ts, BPF_ANY);
			return ts;
		}
		if (py_read(&ts, sizeof(ts), ts + p->thread_next))
			return 0;
	}
	return 0;
}

/*
 * The bytecode frame f runs: the code object's own (at code_adaptive), or
 * in a free-threaded build the copy of index tlbc_index (1 and up: 0 is the
 * code object's own), which its co_tlbc array (_PyCodeArray: size, then
 * pointers) holds. 0: unreadable. Written with as few branches as it can
 * (a failed read leaves zeros): every one multiplies the states the
 * verifier walks through each of the walk's frames (5.10's on arm64 is
 * near its limit).
 */
static __always_inline u64 python_bytecode(const struct python_proc *p, u64 f, u64 code)
{
	u64 base = code + p->code_adaptive, array = 0;
	s64 size = 0;
	s32 index = 0;

	if (p->code_tlbc) {
		py_read(&index, sizeof(index), f + p->frame_tlbc_index);
		py_read(&array, sizeof(array), code + p->code_tlbc);
		py_read(&size, sizeof(size), array);
		/*
		 * 1 <= index < size, in one comparison (a size read as 0 lets
		 * any index by: then the array's entry cannot be read either,
		 * and 0 is returned).
		 */
		if ((u64)((s64)index - 1) < (u64)(size - 1))
			py_read(&base, sizeof(base), array + 8 + 8 * (u64)(s64)index);
	}
	return base;
}

/* The instruction (code units) frame f of code object code is at; < 0: not started. */
static __always_inline s64 python_instruction(const struct python_proc *p, u64 f, u64 code)
{
	s32 lasti = 0;
	u64 ptr = 0, base;

	if (p->instruction_kind == PY_INSTR_POINTER) {
		base = python_bytecode(p, f, code);
		if (!base || py_read(&ptr, sizeof(ptr), f + p->frame_instruction) || ptr < base)
			return -1;
		return (ptr - base) / 2;
	}
	if (py_read(&lasti, sizeof(lasti), f + p->frame_instruction) || lasti < 0)
		return -1;
	if (p->instruction_kind == PY_INSTR_BYTE_OFFSET)
		return (u32)lasti / 2;
	return lasti;
}

/*
 * A walk's frame count, kept in a map so the verifier sees a bounded
 * unknown rather than one exact value per path (which it could not prune).
 */
struct python_walk_state {
	u32 count;
	s32 end; /* enum runtime_end */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct python_walk_state);
} python_walks SEC(".maps");

/*
 * One frame of a walk: writes the frame at *f (unless it is a shim or has
 * not started) and moves *f to the previous one. Returns non-zero when the
 * walk ends (w->end says why). Its variables live here, not in the loop,
 * so the verifier sees the same state at every iteration.
 */
static __always_inline int python_step(const struct python_proc *p, struct python_walk_state *w, u64 *frames, u64 *f)
{
	u32 count = w->count;
	u64 code = 0, word;
	u8 owner = 0;
	s64 instr;

	if (!*f) {
		w->end = RUNTIME_END_ROOT;
		return 1;
	}
	if (count >= MAX_STACK_DEPTH)
		return 1;
	if (p->entry_kind != PY_ENTRY_EVERY_FRAME && py_read(&owner, sizeof(owner), *f + p->frame_owner))
		goto fault;
	if (p->entry_kind == PY_ENTRY_SHIM && owner == PY_OWNED_BY_CSTACK) {
		/* The frame leafward of the shim was its call's outermost. */
		u32 prev = count - 1; /* count 0: out of range, one check for the verifier */

		if (prev < MAX_STACK_DEPTH)
			frames[prev] |= PY_FRAME_EVAL_ENTRY;
		goto next;
	}
	if (py_read(&code, sizeof(code), *f + p->frame_code))
		goto fault;
	/* From 3.14 the code object is a _PyStackRef: tag bits in the low ones. */
	code &= ~PY_STACKREF_TAG_BITS;
	instr = python_instruction(p, *f, code);
	/* A frame whose first instruction has not run yet is not shown. */
	if (instr < 0 || !code)
		goto next;
	if (instr > PY_FRAME_INSTR_MAX)
		instr = PY_FRAME_INSTR_MAX;
	word = (code & PY_FRAME_ADDR_MASK) | ((u64)instr << PY_FRAME_ADDR_BITS);
	if (p->entry_kind == PY_ENTRY_EVERY_FRAME || (p->entry_kind == PY_ENTRY_FLAG && owner))
		word |= PY_FRAME_EVAL_ENTRY;
	/* Checked again where it is used: 5.10's verifier loses the bound of a
	 * 32-bit value spilled to the stack (barrier: the compiler keeps this). */
	barrier_var(count);
	if (count >= MAX_STACK_DEPTH)
		return 1;
	frames[count] = word;
	w->count = count + 1;
next:
	if (!py_read(f, sizeof(*f), *f + p->frame_previous))
		return 0;
fault:
	w->end = RUNTIME_END_READ_FAULT;
	return 1;
}

/*
 * Writes the Python frames of the current thread to frames (zero-terminated)
 * and returns why the walk ended; *n is the number written.
 */
static __always_inline int python_walk(const struct python_proc *p, u64 *frames, u32 *n)
{
	struct python_walk_state *w;
	u32 zero = 0, count;
	u64 f = 0, ts;

	*n = 0;
	w = bpf_map_lookup_elem(&python_walks, &zero);
	if (!w)
		return RUNTIME_END_READ_FAULT;
	w->count = 0;
	w->end = RUNTIME_END_DEPTH;
	ts = python_thread_state(p, user_thread_pointer());
	if (!ts)
		return RUNTIME_END_NO_THREAD;
	if (py_read(&f, sizeof(f), ts + p->thread_frame))
		return RUNTIME_END_READ_FAULT;
	if (p->via_cframe && f && py_read(&f, sizeof(f), f + p->cframe_current_frame))
		return RUNTIME_END_READ_FAULT;
#pragma clang loop unroll(disable)
	for (int i = 0; i < PY_MAX_FRAMES; i++) {
		if (python_step(p, w, frames, &f))
			break;
	}
	count = w->count;
	if (count < MAX_STACK_DEPTH)
		frames[count] = 0;
	*n = count;
	return w->end;
}

#endif /* BPFPROFILER_CPYTHON_H */
