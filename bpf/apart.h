/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The runtimes walked apart from the native walk: interpreters whose frames
 * are read from their own structures, not from the machine stack (CPython,
 * Ruby, PHP).
 * A sample's thread has its runtime's frames walked once (apart_capture, or
 * apart_walk_current then apart_last_walk) into per-CPU scratch, and stored
 * by content in the stacks map like any stack (apart_store): the key's
 * runtime_stack_id names them, its runtime says whose they are, and user
 * space puts each run of them where the native walk met the runtime's entry
 * function (internal/runtimes Runtime.EntryFunction).
 *
 * A runtime walked apart adds its walker header and one lookup in
 * apart_walk: user space fills its map of processes (Runtime.ProcMap) when
 * it finds the runtime in a process, and the walk writes one u64 word per
 * frame, leaf first, zero-terminated: the object the frame runs, its
 * position in it, and the entry flag on the outermost frame of each call of
 * the entry function (capture.RuntimeFrames decodes them).
 */
#ifndef BPFPROFILER_APART_H
#define BPFPROFILER_APART_H

#include "common.h"
#include "stackstore.h"
#include "unwind.h"
#include "cpython.h"
#include "ruby.h"
#include "php.h"

/*
 * The user pc and PHP's VM register (php.h) of the current thread: the
 * sample's registers uregs when it hit user mode, else those the thread
 * saved when it entered the kernel. Zeros when unreadable.
 */
static __always_inline void apart_regs(const u64 *uregs, u64 *pc, u64 *vm)
{
	u64 base;

	/* Apart, not through one pointer: the verifier refuses a load of
	 * ctx and of a kernel struct by the same instruction. */
	if (uregs) {
		*pc = uregs[UREGS_IP / 8];
		*vm = uregs[PHP_UREGS_OPLINE / 8];
		return;
	}
	if (have_task_pt_regs) {
		const u64 *regs = (const u64 *)bpf_task_pt_regs(bpf_get_current_task_btf());

		*pc = regs[UREGS_IP / 8]; /* loads, no helper */
		*vm = regs[PHP_UREGS_OPLINE / 8];
		return;
	}
	base = saved_user_regs_base((struct task_struct *)bpf_get_current_task());
	if (!base || bpf_probe_read_kernel(pc, sizeof(*pc), (void *)(base + UREGS_IP)) ||
	    bpf_probe_read_kernel(vm, sizeof(*vm), (void *)(base + PHP_UREGS_OPLINE)))
		*pc = *vm = 0;
}

/*
 * Walks the frames of the runtime process pid runs, if any, for the current
 * thread (user pc pc, PHP's VM register vm) into frames (*n of them,
 * zero-terminated) and sets *runtime; returns why the walk ended (enum
 * runtime_end), -1 when pid runs none. One runtime per process: the first
 * whose map has it.
 */
static __always_inline int apart_walk(u32 pid, u64 pc, u64 vm, u64 *frames, u32 *n, u32 *runtime)
{
	struct python_proc *py;
	struct ruby_proc *rb;
	struct php_proc *php;

	*n = 0;
	py = bpf_map_lookup_elem(&python_procs, &pid);
	if (py) {
		*runtime = RUNTIME_CPYTHON;
		return python_walk(py, frames, n);
	}
	rb = bpf_map_lookup_elem(&ruby_procs, &pid);
	if (rb) {
		*runtime = RUNTIME_RUBY;
		return ruby_walk(rb, frames, n);
	}
	php = bpf_map_lookup_elem(&php_procs, &pid);
	if (php) {
		*runtime = RUNTIME_PHP;
		return php_walk(php, pc, vm, frames, n);
	}
	return -1;
}

/* Per-CPU buffer of the runtime frames being captured. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64[MAX_STACK_DEPTH]);
} apart_scratch SEC(".maps");

/* The runtime frames of a thread, as captured (apart_capture). */
struct apart_stack {
	const u64 *frames; /* zero-terminated, in apart_scratch; NULL: none */
	s32 hash;	   /* their hash (stackstore.h) */
	s32 end;	   /* enum runtime_end; -1: the process runs no runtime walked apart */
	u32 count;	   /* frames */
	u32 runtime;	   /* enum runtime_id */
};

/* What apart_walk_current found, per CPU (beside apart_scratch). */
struct apart_result {
	s32 hash;
	s32 end;
	u32 count;
	u32 runtime;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct apart_result);
} apart_results SEC(".maps");

/*
 * On x86-64 a global function, which the verifier checks once, apart from
 * its callers (inlined, 5.10's verifier took up to 356k instructions more
 * for a program that calls it). Inlined on arm64, where JITs before 6.1
 * refuse programs that mix tail calls with BPF-to-BPF calls: each program
 * calls it once.
 */
#if defined(__TARGET_ARCH_x86)
#define APART_WALK_FUNCTION __attribute__((noinline)) int
#else
#define APART_WALK_FUNCTION static __always_inline int
#endif

/*
 * Walks and hashes the runtime frames of the current thread of process pid
 * (user pc pc, PHP's VM register vm: apart_regs) into this CPU's
 * apart_scratch and apart_results (end -1: pid runs no runtime walked
 * apart). Returns 0.
 */
APART_WALK_FUNCTION apart_walk_current(u32 pid, u64 pc, u64 vm)
{
	struct apart_result *r;
	u32 zero = 0, n = 0, runtime = RUNTIME_NONE;
	u64 *frames;

	r = bpf_map_lookup_elem(&apart_results, &zero);
	frames = bpf_map_lookup_elem(&apart_scratch, &zero);
	if (!r)
		return 0;
	r->end = -1;
	r->count = 0;
	r->runtime = RUNTIME_NONE;
	if (!frames)
		return 0;
	r->end = apart_walk(pid, pc, vm, frames, &n, &runtime);
	r->runtime = runtime;
	r->count = n;
	r->hash = n ? hash_frames(frames, n * sizeof(u64)) : -1;
	return 0;
}

/*
 * Describes in st what the last apart_walk_current on this CPU found
 * (st->end -1: none). The frames stay valid until the next walk.
 */
static __always_inline void apart_last_walk(struct apart_stack *st)
{
	struct apart_result *r;
	u32 zero = 0;

	st->frames = NULL;
	st->end = -1;
	st->count = 0;
	st->runtime = RUNTIME_NONE;
	r = bpf_map_lookup_elem(&apart_results, &zero);
	if (!r)
		return;
	st->end = r->end;
	st->count = r->count;
	st->hash = r->hash;
	st->runtime = r->runtime;
	if (r->count)
		st->frames = bpf_map_lookup_elem(&apart_scratch, &zero);
}

/*
 * Captures the runtime frames of the current thread of process pid into st,
 * from the registers it saved entering the kernel.
 */
static __always_inline void apart_capture(u32 pid, struct apart_stack *st)
{
	u64 pc, vm;

	apart_regs(0, &pc, &vm);
	apart_walk_current(pid, pc, vm);
	apart_last_walk(st);
}

/*
 * Stores the frames of rs in stacks, counts its walk in st and sets the
 * key's runtime; returns the stack id for the key (-1: none, the loss
 * counted).
 */
static __always_inline s32 apart_store(void *stacks, const struct apart_stack *rs, struct sampler_stats *st,
				       struct stack_key *key)
{
	/* Unsigned: -1 (no walk) is out of range too. */
	u32 end = rs->end, runtime = rs->runtime, row;
	s32 id;

	if (end >= NR_RUNTIME_ENDS || runtime >= NR_RUNTIMES)
		return -1;
	key->runtime = runtime;
	row = runtime * NR_RUNTIME_ENDS + end;
	/* 5.10's verifier loses the bound of a spilled 32-bit value. */
	barrier_var(row);
	if (row >= NR_RUNTIMES * NR_RUNTIME_ENDS)
		return -1;
	((u64 *)st->runtime_ends)[row]++;
	barrier_var(runtime);
	if (runtime >= NR_RUNTIMES)
		return -1;
	st->runtime_frames[runtime] += rs->count;
	if (!rs->frames) {
		/* Frames found but not kept (not stored, or evicted since). */
		if (rs->count)
			st->runtime_stack_lost[runtime]++;
		return -1;
	}
	id = store_stack(stacks, rs->frames, rs->hash);
	if (id < 0) {
		st->runtime_stack_lost[runtime]++;
		return -1;
	}
	return id;
}

#endif /* BPFPROFILER_APART_H */
