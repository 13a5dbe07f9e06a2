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
 * A process whose unwind tables are loaded has its user stack walked with
 * them (unwind.h): offcpu_switch hands the walk to walk_switch_out, which
 * tail-calls itself UNWIND_WALK_FRAMES frames at a time and then stores the
 * stack like capture_user_stack. So offcpu_switch handles the switch-in
 * first: a tail call does not return.
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

/* A traced thread that went to sleep, by host tid. */
struct offcpu_sleep {
	u64 timestamp;	    /* bpf_ktime_get_ns at switch-out; 0: not sleeping */
	u32 pid;	    /* tgid as the collector sees it (see current_ids) */
	u32 tid;	    /* tid as the collector sees it */
	s32 user_id;	    /* id in user_stacks, or a negative user stack id (see record) */
	s16 unwind_end;	    /* how the walk with unwind tables ended; -1: frame pointers */
	u16 unwind_frames;  /* frames it found */
	s32 runtime_id;	    /* its frames of a runtime walked apart: their id in user_stacks; -1: none */
	s8 runtime_end;	    /* how their walk ended (enum runtime_end); -1: no such runtime */
	u8 runtime;	    /* enum runtime_id */
	u16 runtime_frames; /* frames it found */
	/* Its OpenTelemetry thread context at switch-out (threadctx.h). */
	struct thread_ctx_result thread_ctx;
};

/* A switch-out whose user stack is being walked with unwind tables. */
struct switchout_walk {
	struct unwind_walk walk;
	u32 host_tid; /* the key of sleeps */
	u32 reserved; /* explicit padding */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct switchout_walk);
} walks SEC(".maps");

int walk_switch_out(void *ctx);
int capture_switch_out(unsigned long long *ctx);

#define PROG_WALK 0
#define PROG_CAPTURE 1

/*
 * Slot PROG_WALK: walk_switch_out, which tail-calls itself until the walk
 * ends; slot PROG_CAPTURE: capture_switch_out, which offcpu_switch hands a
 * switch-out to, so the verifier checks the captures from one state.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__array(values, int(void *));
} walk_progs SEC(".maps") = {
	.values = { [PROG_WALK] = (void *)&walk_switch_out, [PROG_CAPTURE] = (void *)&capture_switch_out },
};

/* The switch's timestamp, per CPU, for capture_switch_out. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} switch_now SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STARTS);
	__type(key, u32);
	__type(value, struct offcpu_sleep);
} sleeps SEC(".maps");

/* A zeroed sleeps entry to insert: it would take the stack a call leaves. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct offcpu_sleep);
} fresh_sleeps SEC(".maps");

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

/*
 * Hands the user stack of prev (current) to walk_switch_out when the
 * unwind tables of its process know its pc; returns only when they do not
 * (or the tail call failed): frame pointers then.
 */
static __always_inline void walk_with_tables(void *ctx, struct task_struct *prev, u32 pid, u32 host_tid)
{
	struct switchout_walk *w;
	u32 zero = 0;

	if (prev->flags & PF_NO_USER_STACK)
		return;
	w = bpf_map_lookup_elem(&walks, &zero);
	if (!w || saved_user_regs(prev, &w->walk.regs) || unwind_walk_start(&w->walk, pid))
		return;
	w->host_tid = host_tid;
	bpf_tail_call(ctx, &walk_progs, PROG_WALK);
}

/* Takes the frames of a runtime walked apart of the current thread (of process pid) for s. */
static __always_inline void capture_runtime(struct offcpu_sleep *s, u32 pid)
{
	struct apart_stack rs;

	apart_capture(pid, &rs);
	s->runtime_end = rs.end;
	s->runtime = rs.runtime;
	s->runtime_frames = rs.count;
	s->runtime_id = rs.frames ? store_user_stack(rs.frames, rs.hash) : -1;
}

/* Takes the OpenTelemetry thread context of the current thread (of process pid) for s. */
static __always_inline void capture_thread_ctx(struct offcpu_sleep *s, u32 pid)
{
	struct thread_ctx_result *r;
	u32 zero = 0;

	thread_ctx_read(pid, 0); /* in the kernel: its saved registers */
	r = bpf_map_lookup_elem(&thread_ctx_results, &zero);
	if (r)
		s->thread_ctx = *r;
	else
		s->thread_ctx = (struct thread_ctx_result){ .attrs_id = -1, .outcome = NR_THREAD_CTX };
}

/* prev (current) goes to sleep: remember when, and its user stack. */
static __always_inline void switch_out(void *ctx, u64 now, struct task_struct *prev, const struct sampler_config *cfg)
{
	struct offcpu_sleep *s, *fresh;
	u32 host_tid = prev->pid, zero = 0;
	u32 pid, tid;

	/* prev is still current here, so its ids can be translated. */
	if (traced_ids(cfg, prev, &pid, &tid))
		return;
	s = bpf_map_lookup_elem(&sleeps, &host_tid);
	if (!s) {
		fresh = bpf_map_lookup_elem(&fresh_sleeps, &zero); /* never written: zeros */
		if (!fresh)
			return;
		if (bpf_map_update_elem(&sleeps, &host_tid, fresh, BPF_ANY)) {
			count_event(STATS_LOST_MAP_FULL); /* sleeps is full */
			return;
		}
		s = bpf_map_lookup_elem(&sleeps, &host_tid);
		if (!s)
			return;
	}
	s->pid = pid;
	s->tid = tid;
	/* The sleep starts now, whatever stack it gets (the walk takes its time). */
	s->timestamp = now;
	s->unwind_end = -1;
	s->unwind_frames = 0;
	s->user_id = -EFAULT; /* until a capture says otherwise */
	capture_runtime(s, pid);
	capture_thread_ctx(s, pid);
	walk_with_tables(ctx, prev, pid, host_tid);
	s->user_id = capture_user_stack(ctx, prev);
}

/*
 * The runtime frames s took at switch-out, described in rs with their
 * frames found again in user_stacks (NULL frames when evicted: counted as
 * lost), or NULL when the thread runs no runtime walked apart.
 */
static __always_inline const struct apart_stack *runtime_of(struct offcpu_sleep *s, struct apart_stack *rs)
{
	s32 id = s->runtime_id;

	rs->end = s->runtime_end;
	rs->runtime = s->runtime;
	rs->count = s->runtime_frames;
	rs->frames = NULL;
	if (rs->end < 0)
		return NULL;
	if (id >= 0) {
		rs->frames = bpf_map_lookup_elem(&user_stacks, &id);
		if (rs->frames)
			rs->hash = hash_frames(rs->frames, sizeof(stack_trace_t));
	}
	return rs;
}

/* next runs again: count how long it was away. */
static __always_inline void switch_in(u64 now, struct task_struct *next)
{
	struct offcpu_sleep *s;
	u32 host_tid = next->pid;
	const u64 *user = 0;
	struct apart_stack rs;
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
	record_at_switch_in(next, s->pid, s->tid, delta, user, user_id,
			    (struct walk_result){ .end = s->unwind_end, .frames = s->unwind_frames },
			    runtime_of(s, &rs), &s->thread_ctx);
}

/* Three arguments: prev_state only exists from 5.18 (see task_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next)
{
	/* One timestamp for both ends, so the program's cost is charged to neither thread. */
	u64 now = bpf_ktime_get_ns();
	u32 zero = 0;
	u64 *at;

	/* Switch-in first: the switch-out ends in a tail call. */
	switch_in(now, next);
	if (preempt || task_state(prev) == TASK_RUNNING)
		return 0;
	at = bpf_map_lookup_elem(&switch_now, &zero);
	if (!at)
		return 0;
	*at = now;
	bpf_tail_call(ctx, &walk_progs, PROG_CAPTURE);
	return 0;
}

/* prev goes to sleep (offcpu_switch found): takes its stacks. */
SEC("tp_btf/sched_switch")
int BPF_PROG(capture_switch_out, _Bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct sampler_config *cfg;
	u32 zero = 0;
	u64 *now;

	now = bpf_map_lookup_elem(&switch_now, &zero);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (now && cfg)
		switch_out(ctx, *now, prev, cfg);
	return 0;
}

/* Walks UNWIND_WALK_FRAMES frames of this CPU's switch-out, then the next ones or stores the stack. */
SEC("tp_btf/sched_switch")
int walk_switch_out(void *ctx)
{
	struct switchout_walk *w;
	struct offcpu_sleep *s;
	u32 zero = 0;
	u64 *frames;
	int end;
	u32 n;

	w = bpf_map_lookup_elem(&walks, &zero);
	frames = bpf_map_lookup_elem(&scratch, &zero);
	if (!w || !frames)
		return 0;
	end = unwind_walk_some(&w->walk, frames);
	if (end < 0 && w->walk.calls < UNWIND_WALK_CALLS) {
		w->walk.calls++;
		bpf_tail_call(ctx, &walk_progs, PROG_WALK);
	}
	if (end < 0)
		end = UNWIND_END_DEPTH;
	s = bpf_map_lookup_elem(&sleeps, &w->host_tid);
	if (!s)
		return 0;
	n = unwind_walk_end(&w->walk, frames);
	s->user_id = store_user_stack(frames, hash_frames(frames, n * sizeof(u64)));
	s->unwind_end = end;
	s->unwind_frames = n;
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
