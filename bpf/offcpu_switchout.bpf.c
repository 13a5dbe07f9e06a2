//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Off-CPU time on every kernel (5.10 and up; offcpu.bpf.c is the cheaper
 * program of Linux >= 6.18, see offcpu.h for what both share): on
 * tp_btf/sched_switch, a targeted thread that goes to sleep (prev, still
 * the current task) gets its user stack taken there, with bpf_get_stack,
 * and stored by content in user_stacks; its switch-out timestamp, ids and
 * that stack's id go into starts. When it is switched back in (next, on any
 * CPU) a wait of at least min_block_ns is counted with its kernel stack
 * (bpf_get_task_stack(next): next is not running yet, so its saved kernel
 * stack is where it blocked) and the user stack found in user_stacks.
 *
 * The cost is a user stack walk at every switch-out of a traced thread,
 * short sleep or not (the wait's length is not known yet); the stack is
 * written to user_stacks only when it is not there already, so threads that
 * block again and again at the same place cost a walk, a hash and a lookup.
 *
 * user_stacks is an LRU map, not drained: a user stack evicted while its
 * thread sleeps is counted as a user stack error (-ENOENT). starts is a
 * hash by host tid (task storage needs 5.11), emptied when a task is freed.
 *
 * The tracepoint's prev_state argument exists from 5.18 only: the state of
 * prev is read from the task instead (__state from 5.14, state before).
 */
#include "offcpu.h"

#define MAX_STARTS 32768
#define MAX_USER_STACKS 8192

#ifndef ENOENT
#define ENOENT 2
#endif

/* A traced thread that went to sleep, by host tid. */
struct offcpu_sleep {
	u64 timestamp; /* bpf_ktime_get_ns at switch-out; 0: not sleeping */
	u32 pid;       /* tgid as the collector sees it (see current_ids) */
	u32 tid;       /* tid as the collector sees it */
	s32 user_id;   /* id in user_stacks, or a negative user stack id (see record) */
	u32 reserved;  /* explicit padding */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STARTS);
	__type(key, u32);
	__type(value, struct offcpu_sleep);
} sleeps SEC(".maps");

/* User stacks of sleeping threads, by content (stackstore.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_USER_STACKS);
	__type(key, u32);
	__type(value, stack_trace_t);
} user_stacks SEC(".maps");

/* The task's scheduler state: __state from 5.14, state (a long) before. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

/*
 * Stores frames in user_stacks (see store_stack), looking first: a thread
 * that blocks again and again at the same place finds its stack there, and
 * an LRU update costs more than a lookup (it takes a free node and locks).
 */
static __always_inline s32 store_user_stack(const u64 *frames, s32 hash)
{
	const u64 *old;

	if (hash >= 0) {
		old = bpf_map_lookup_elem(&user_stacks, &hash);
		if (old && same_frames(old, frames))
			return hash;
	}
	return store_stack(&user_stacks, frames, hash);
}

/* The user stack of the current task, stored in user_stacks: its id, or a negative user stack id. */
static __always_inline s32 capture_user_stack(void *ctx, struct task_struct *task)
{
	u32 zero = 0;
	u64 *frames;
	int n; /* int on every kernel: see common.h */

	if (task->flags & PF_NO_USER_STACK)
		return -1;
	frames = bpf_map_lookup_elem(&scratch, &zero);
	if (!frames)
		return -ENOENT;
	n = bpf_get_stack(ctx, frames, sizeof(stack_trace_t), BPF_F_USER_STACK);
	if (n == 0)
		n = -EFAULT;
	return store_user_stack(frames, hash_frames(frames, n));
}

/* prev (current) goes to sleep: remember when, and its user stack. */
static __always_inline void switch_out(void *ctx, u64 now, struct task_struct *prev, const struct sampler_config *cfg)
{
	struct offcpu_sleep *s, fresh = {};
	u32 host_tid = prev->pid;
	u32 pid, tid;

	/* prev is still current here, so its ids can be translated. */
	if (traced_ids(cfg, prev, &pid, &tid))
		return;
	s = bpf_map_lookup_elem(&sleeps, &host_tid);
	if (!s) {
		if (bpf_map_update_elem(&sleeps, &host_tid, &fresh, BPF_ANY)) {
			count_event(STATS_LOST_MAP_FULL); /* sleeps is full */
			return;
		}
		s = bpf_map_lookup_elem(&sleeps, &host_tid);
		if (!s)
			return;
	}
	s->pid = pid;
	s->tid = tid;
	s->user_id = capture_user_stack(ctx, prev);
	s->timestamp = now;
}

/* next runs again: count how long it was away. */
static __always_inline void switch_in(u64 now, struct task_struct *next)
{
	struct offcpu_sleep *s;
	u32 host_tid = next->pid;
	const u64 *user = 0;
	s32 user_id;
	u64 delta;

	if (host_tid == 0)
		return;
	s = bpf_map_lookup_elem(&sleeps, &host_tid);
	if (!s || !s->timestamp)
		return;
	delta = now - s->timestamp;
	s->timestamp = 0;
	if (delta < min_block_ns)
		return;
	user_id = s->user_id;
	if (user_id >= 0) {
		user = bpf_map_lookup_elem(&user_stacks, &user_id);
		if (user)
			user_id = hash_frames(user, sizeof(stack_trace_t));
		else
			user_id = -ENOENT; /* evicted */
	}
	record_at_switch_in(next, s->pid, s->tid, delta, user, user_id);
}

/* Three arguments: prev_state only exists from 5.18 (see task_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct sampler_config *cfg;
	u32 zero = 0;
	/* One timestamp for both ends, so the program's cost is charged to neither thread. */
	u64 now = bpf_ktime_get_ns();

	if (!preempt && task_state(prev) != TASK_RUNNING) {
		cfg = bpf_map_lookup_elem(&config, &zero);
		if (cfg)
			switch_out(ctx, now, prev, cfg);
	}
	switch_in(now, next);
	return 0;
}

/* A thread's task is freed: forget its sleep. */
SEC("tp_btf/sched_process_free")
int BPF_PROG(offcpu_free, struct task_struct *p)
{
	u32 tid = p->pid;

	bpf_map_delete_elem(&sleeps, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
