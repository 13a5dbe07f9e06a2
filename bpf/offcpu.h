/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the two off-CPU programs share (offcpu.bpf.c takes the user stack of
 * a woken thread in a BPF task work, Linux >= 6.18; offcpu_switchout.bpf.c
 * takes it when the thread goes to sleep, on every kernel): the pid filters,
 * the per-CPU frame buffer, and record(), which counts one wait with its
 * stacks in the current generation of the drained maps (drainmaps.h, see
 * cpu.bpf.c for the double-buffering protocol).
 *
 * Only voluntary sleeps are recorded: a thread preempted while runnable is
 * waiting on a runqueue, not blocked, and is left to the CPU profile's view
 * of contention. Blocks shorter than min_block_ns are not recorded.
 *
 * User stacks of processes whose unwind tables are loaded are walked with
 * them (unwind.h), others with frame pointers. The frames of runtimes walked
 * apart (apart.h: CPython) are taken with the user stack.
 */
#ifndef BPFPROFILER_OFFCPU_H
#define BPFPROFILER_OFFCPU_H

#include "common.h"
#include "stackstore.h"
#include "drainmaps.h"
#include "announce.h"
#include "unwind_walk.h"
#include "apart.h"
#include "scopes.h"
#include "threadctx.h"

#define MAX_EXCLUDED 64

/* include/linux/sched.h: threads that never return to user space. */
#define PF_IO_WORKER 0x00000010
#define PF_USER_WORKER 0x00004000
#define PF_NO_USER_STACK (PF_KTHREAD | PF_IO_WORKER | PF_USER_WORKER)

/* Blocks shorter than this are not recorded; set at load time. */
const volatile u64 min_block_ns = 0;

/* Per-CPU frames being captured (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, stack_trace_t);
} scratch SEC(".maps");

/* tgid (as the collector sees it) -> 1: never recorded (the collector itself). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EXCLUDED);
	__type(key, u32);
	__type(value, u8);
} excluded_pids SEC(".maps");

/*
 * The ids, as the collector sees them, of the current thread (prev at
 * switch-out) if its sleeps are to be recorded; non-zero otherwise.
 */
static __always_inline int traced_ids(const struct sampler_config *cfg, struct task_struct *prev, u32 *pid, u32 *tid)
{
	if (prev->tgid == 0) /* idle */
		return -1;
	if (current_ids(cfg, pid, tid))
		return -1;
	if (cfg->filter_enabled && !bpf_map_lookup_elem(&target_pids, pid))
		return -1;
	if (bpf_map_lookup_elem(&excluded_pids, pid))
		return -1;
	return 0;
}

static __always_inline void remember_comm(struct task_struct *task, u32 tid)
{
	struct thread_comm cur = {};

	if ((int)bpf_probe_read_kernel_str(cur.comm, sizeof(cur.comm), task->comm) >= 0) /* int: see common.h */
		store_comm(&comms, tid, &cur);
}

/* How a wait's user stack was walked: with unwind tables, or not (end < 0). */
struct walk_result {
	s32 end;    /* enum unwind_end, or -1: frame pointers */
	u32 frames; /* frames the walk found */
};

#define NOT_WALKED ((struct walk_result){ .end = -1 })

/*
 * Counts one wait of task with its stacks in the current generation; the
 * caller runs with preemption disabled. With user frames, user_id is their
 * hash (or the capture's error); without, it is the user stack id to count:
 * -1 for a thread without user stack, another negative value for a user
 * stack that could not be taken (counted as an error). walk says how the
 * user stack was walked, for the unwind counters; rs is the thread's frames
 * of a runtime walked apart, taken with it (NULL: none); tc its OpenTelemetry thread context
 * (NULL: not read) with its packed attributes tc_attrs (NULL: none or not
 * kept).
 */
static __always_inline void record(struct task_struct *task, u32 pid, u32 tid, u64 blocked_ns, const u64 *kernel,
				   s32 kernel_hash, const u64 *user, s32 user_id, struct walk_result walk,
				   const struct apart_stack *rs, const struct thread_ctx_result *tc)
{
	struct stack_key key = { .pid = pid, .tid = tid, .runtime_stack_id = -1, .trace_attrs_id = -1 };
	struct sampler_config *cfg;
	struct sampler_stats *st;
	struct inflight_seq *in;
	u32 zero = 0, gen;

	in = bpf_map_lookup_elem(&inflight, &zero);
	if (!in)
		return;
	/*
	 * Atomic add: a full barrier before config is read on x86 (lock add);
	 * relaxed on arm64, where the drain's grace after the flip (1 ms,
	 * internal/stackdrain) lets the increment become visible first.
	 */
	__sync_fetch_and_add(&in->enter, 1);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		goto out;
	gen = cfg->generation & 1;
	st = bpf_map_lookup_elem(&stats, &gen);
	if (!st)
		goto out;
	key.user_stack_id = user_id;
	/* task has not run since it blocked: its open scope is the one it blocked in. */
	scope_of(task->pid, task->tgid, tc ? tc->goroutine : 0, &key);
	if (tc)
		thread_ctx_key(tc, &key, st);
	if (gen) {
		key.kernel_stack_id = store_stack(&stacks_1, kernel, kernel_hash);
		if (user)
			key.user_stack_id = store_stack(&stacks_1, user, user_id);
		if (rs)
			key.runtime_stack_id = apart_store(&stacks_1, rs, st, &key);
	} else {
		key.kernel_stack_id = store_stack(&stacks_0, kernel, kernel_hash);
		if (user)
			key.user_stack_id = store_stack(&stacks_0, user, user_id);
		if (rs)
			key.runtime_stack_id = apart_store(&stacks_0, rs, st, &key);
	}
	if (add_delta(gen ? (void *)&counts_1 : (void *)&counts_0, &key, blocked_ns)) {
		st->lost_map_full++;
	} else {
		/* Kept even without a stack, like cpu.bpf.c: the loss is counted. */
		st->recorded++;
		count_stack_loss(st->user_stack_lost, key.user_stack_id);
		count_stack_loss(st->kernel_stack_lost, key.kernel_stack_id);
		/* Unsigned: -1 (not walked) is out of range too. */
		u32 end = walk.end;

		if (end < NR_UNWIND_ENDS) {
			st->unwind_ends[end]++;
			st->unwind_frames += walk.frames;
		}
		remember_comm(task, tid);
		announce(task->tgid, pid, task->flags, st);
		if (end == UNWIND_END_NO_MAPPING)
			request_rescan(task->tgid, pid, st);
	}
out:
	__sync_fetch_and_add(&in->exit, 1);
}

/*
 * Counts a wait of next at its switch-in, with its kernel stack (where it
 * blocked: next is not running yet) and the given user frames (or user
 * stack id, see record).
 */
static __always_inline void record_at_switch_in(struct task_struct *next, u32 pid, u32 tid, u64 delta, const u64 *user,
						s32 user_id, struct walk_result walk, const struct apart_stack *rs,
						const struct thread_ctx_result *tc)
{
	u32 zero = 0;
	u64 *frames = bpf_map_lookup_elem(&scratch, &zero);
	int n; /* int on every kernel: see common.h */

	if (!frames)
		return;
	n = bpf_get_task_stack(next, frames, sizeof(stack_trace_t), 0);
	record(next, pid, tid, delta, frames, hash_frames(frames, n), user, user_id, walk, rs, tc);
}

#endif /* BPFPROFILER_OFFCPU_H */
