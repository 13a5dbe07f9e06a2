//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Off-CPU time, Linux >= 6.18 (see offcpu.h for what both off-CPU programs
 * share and offcpu_switchout.bpf.c for older kernels): on
 * tp_btf/sched_switch, a targeted thread that goes to sleep (prev) gets its
 * switch-out timestamp and ids stored in its task storage; when it is
 * switched back in (next, on any CPU) the time it was away is added to
 * (pid, tid, user stack id, kernel stack id) if it is at least min_block_ns.
 *
 * Stacks are only taken for waits of at least min_block_ns, so the
 * switch-out of a short sleep costs a timestamp and a task-storage write:
 * - the kernel stack at switch-in, with bpf_get_task_stack(next): next is
 *   not running yet, so its saved kernel stack is where it blocked (it may
 *   start inside __schedule);
 * - the user stack cannot be read from another task, so the switch-in
 *   stores the wait (time and kernel frames) in "pending" and schedules a
 *   BPF task work (TWA_RESUME) on next: offcpu_user_stack runs in next's own
 *   context before it returns to user space, when its user registers are
 *   still those of the kernel entry it blocked in (syscall, page fault or
 *   interrupt), takes the user stack (with unwind tables when the process
 *   has them, one frame per bpf_loop iteration) and its runtime frames
 *   (apart.h), and counts the wait. Kernel threads
 *   (and user workers, which never return to user space) are counted at
 *   switch-in, without a user stack.
 *
 * A count and its stacks are written by one program invocation, in the
 * generation it read after announcing itself in "inflight", so nothing
 * refers across generations; a wait still pending at a drain is counted in
 * the next window. The task work callback runs with preemption enabled: it
 * disables preemption around that section, as the inflight protocol
 * requires (invocations on one CPU must not interleave). offcpu_free, which
 * may run in a softirq, writes no generation and stays out of the protocol.
 *
 * Starts live in task storage, freed with the task: nothing is evicted, and
 * a sleep whose storage cannot be created is counted (lost_map_full).
 *
 * Kernel requirements: bpf_task_work_schedule_resume_impl (6.18), bpf_loop (5.17),
 * bpf_preempt_disable (6.10), the prev_state argument of sched_switch
 * (5.18), task storage in tracing programs (5.11).
 */
#include "offcpu.h"

#define MAX_PENDING 1024

/* Kernel types of the BPF task work kfunc (kernel/bpf/helpers.c, 6.18+). */
struct bpf_map {
	int unused;
} __attribute__((preserve_access_index));
struct bpf_task_work {
	u64 __opaque;
};
typedef int (*bpf_task_work_callback_t)(struct bpf_map *map, void *key, void *value);

/* Task storage of a traced thread that went to sleep. */
struct offcpu_start {
	u64 timestamp; /* bpf_ktime_get_ns at switch-out; 0: not sleeping */
	u32 pid;       /* tgid as the collector sees it (see current_ids) */
	u32 tid;       /* tid as the collector sees it */
};

/* A long wait of a user thread, by host tid, until its task work counts it. */
struct offcpu_pending {
	struct bpf_task_work work;
	u64 blocked_ns; /* 0: nothing pending */
	u32 pid;
	u32 tid;
	s32 kernel_stack; /* frame hash, or -errno from bpf_get_task_stack */
	u32 reserved;	  /* explicit padding */
	stack_trace_t kernel;
	stack_trace_t user;
};

extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw, void *map__map,
					      bpf_task_work_callback_t callback, void *aux__prog) __ksym;
extern void bpf_preempt_disable(void) __ksym;
extern void bpf_preempt_enable(void) __ksym;

/* Freed with the task: entries of exited threads cannot accumulate. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_start);
} starts SEC(".maps");

/* Host tid -> wait whose user stack is not taken yet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PENDING);
	__type(key, u32);
	__type(value, struct offcpu_pending);
} pending SEC(".maps");

/*
 * All zeros, to create pending entries from (too large for the BPF stack);
 * plain bytes, as a bpf_task_work field could not be read.
 */
struct pending_zero {
	u8 bytes[sizeof(struct offcpu_pending)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct pending_zero);
} zero_pending SEC(".maps");

/* prev (current) goes to sleep: remember when. */
static __always_inline void switch_out(u64 now, struct task_struct *prev, const struct sampler_config *cfg)
{
	struct offcpu_start *start;
	u32 pid, tid;

	/* prev is still current here, so its ids can be translated. */
	if (traced_ids(cfg, prev, &pid, &tid))
		return;
	start = bpf_task_storage_get(&starts, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!start) {
		count_event(STATS_LOST_MAP_FULL);
		return;
	}
	start->pid = pid;
	start->tid = tid;
	start->timestamp = now;
}

/*
 * A walk with unwind tables in the task work (see walk_user_stack), in a
 * per-CPU map rather than on the stack: bpf_loop's callback then reads the
 * same unknown values at every iteration, so the verifier checks it once
 * instead of once per frame.
 */
struct loop_walk {
	struct unwind_walk w;
	s32 end;      /* enum unwind_end once the walk ended */
	u32 reserved; /* explicit padding */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct loop_walk);
} walks SEC(".maps");

/* bpf_loop callback: one frame of this CPU's walk into scratch. */
static long walk_frame(u32 index, void *data)
{
	u32 zero = 0;
	struct loop_walk *lw = bpf_map_lookup_elem(&walks, &zero);
	u64 *frames = bpf_map_lookup_elem(&scratch, &zero);
	int r;

	if (!lw || !frames)
		return 1; /* never: the arrays have their element */
	r = unwind_walk_one(&lw->w, frames);
	if (r < 0)
		return 0;
	lw->end = r;
	return 1;
}

/*
 * Walks the current task's user stack with the unwind tables of pid into
 * scratch, if they know where its pc is: returns the frames (their hash in
 * *hash, how the walk ended in *walk), or NULL for frame pointers. The
 * caller has preemption disabled (the state is per CPU).
 */
static __always_inline u64 *walk_user_stack(struct task_struct *task, u32 pid, struct walk_result *walk, s32 *hash)
{
	struct loop_walk *lw;
	u32 zero = 0, n;
	u64 *frames;

	lw = bpf_map_lookup_elem(&walks, &zero);
	if (!lw || saved_user_regs(task, &lw->w.regs) || unwind_walk_start(&lw->w, pid))
		return NULL;
	lw->end = UNWIND_END_DEPTH;
	bpf_loop(MAX_STACK_DEPTH, walk_frame, NULL, 0);
	frames = bpf_map_lookup_elem(&scratch, &zero);
	if (!frames)
		return NULL;
	n = unwind_walk_end(&lw->w, frames);
	walk->end = lw->end;
	walk->frames = n;
	*hash = hash_frames(frames, n * sizeof(u64));
	return frames;
}

/*
 * apart_capture's walk as a global function on every architecture: this
 * object makes no tail calls, and the walk inlined in the task work takes
 * more stack than the verifier allows with it.
 */
__attribute__((noinline)) int apart_walk_global(u32 pid, u64 pc, u64 vm)
{
	return apart_walk_current(pid, pc, vm);
}

/*
 * thread_ctx_read as a global function, checked once: inlined, the task
 * work checks it again for each state the walks before it leave.
 */
__attribute__((noinline)) int thread_ctx_read_global(u32 pid)
{
	thread_ctx_read(pid, 0); /* in the kernel: its saved registers */
	return 0;
}

/*
 * Task work of a thread with a pending wait, in its own context on its way
 * back to user space: its user stack is still the one it blocked with. The
 * entry is deleted once counted, so pending only holds waits in flight.
 */
static int offcpu_user_stack(struct bpf_map *map, void *key, void *value)
{
	struct offcpu_pending *p = value;
	struct task_struct *task = bpf_get_current_task_btf();
	struct walk_result walk = NOT_WALKED;
	struct thread_ctx_result *tc;
	struct apart_stack rs;
	u32 tid = *(u32 *)key, zero = 0;
	u64 pc, vm;
	s32 user_hash;
	u64 *user;
	int n; /* int on every kernel: see common.h */

	/*
	 * Not preemptible from here: record() requires it, and the capture
	 * uses this CPU's callchain buffer, which a preempting sched_switch
	 * capture would otherwise find busy.
	 */
	bpf_preempt_disable();
	if (p->blocked_ns) {
		user = walk_user_stack(task, p->pid, &walk, &user_hash);
		if (!user) {
			n = bpf_get_task_stack(task, p->user, sizeof(p->user), BPF_F_USER_STACK);
			user = p->user;
			user_hash = hash_frames(p->user, n);
		}
		apart_regs(0, &pc, &vm); /* the thread is current */
		apart_walk_global(p->pid, pc, vm);
		apart_last_walk(&rs);
		thread_ctx_read_global(p->pid); /* the thread is current */
		tc = bpf_map_lookup_elem(&thread_ctx_results, &zero);
		record(task, p->pid, p->tid, p->blocked_ns, p->kernel, p->kernel_stack, user, user_hash, walk, &rs, tc);
	}
	bpf_preempt_enable();
	bpf_map_delete_elem(&pending, &tid);
	return 0;
}

/*
 * A user thread's wait: its user stack is taken by a task work when it
 * returns to user space. A second long wait before that (in the same kernel
 * entry, so with the same user stack) is added to the pending one if its
 * kernel stack is the same, else counted now without user stack (-EBUSY).
 */
static __always_inline void defer_user_stack(struct task_struct *next, u32 pid, u32 tid, u64 delta)
{
	struct offcpu_pending *p;
	u32 host_tid = next->pid, zero = 0;
	int n; /* int on every kernel: see common.h */
	int err;

	p = bpf_map_lookup_elem(&pending, &host_tid);
	if (!p) {
		struct pending_zero *empty = bpf_map_lookup_elem(&zero_pending, &zero);

		if (!empty)
			return;
		/*
		 * pending full (-E2BIG): counted as a failed user stack, not as
		 * a full stack map (-ENOSPC, see count_stack_loss).
		 */
		err = bpf_map_update_elem(&pending, &host_tid, empty, BPF_NOEXIST);
		if (err && err != -EEXIST) {
			record_at_switch_in(next, pid, tid, delta, 0, -ENOSPC, NOT_WALKED, NULL, NULL);
			return;
		}
		p = bpf_map_lookup_elem(&pending, &host_tid);
		if (!p)
			return;
	}
	if (p->blocked_ns) {
		u32 zero = 0;
		u64 *frames = bpf_map_lookup_elem(&scratch, &zero);
		s32 kernel_hash;

		if (!frames)
			return;
		n = bpf_get_task_stack(next, frames, sizeof(stack_trace_t), 0);
		kernel_hash = hash_frames(frames, n);
		if (kernel_hash == p->kernel_stack && p->pid == pid && p->tid == tid &&
		    same_frames(frames, p->kernel)) {
			p->blocked_ns += delta;
			return;
		}
		record(next, pid, tid, delta, frames, kernel_hash, 0, -EBUSY, NOT_WALKED, NULL, NULL);
		return;
	}
	n = bpf_get_task_stack(next, p->kernel, sizeof(p->kernel), 0);
	p->kernel_stack = hash_frames(p->kernel, n);
	p->pid = pid;
	p->tid = tid;
	p->blocked_ns = delta;
	err = bpf_task_work_schedule_resume_impl(next, &p->work, &pending, offcpu_user_stack, 0);
	if (err) {
		/* Count it now, without user stack. */
		p->blocked_ns = 0;
		record(next, pid, tid, delta, p->kernel, p->kernel_stack, 0, err < -1 ? err : -EINVAL, NOT_WALKED, NULL,
		       NULL);
	}
}

/* next runs again: count how long it was away. */
static __always_inline void switch_in(u64 now, struct task_struct *next)
{
	struct offcpu_start *start;
	u64 delta;

	if (next->pid == 0)
		return;
	start = bpf_task_storage_get(&starts, next, 0, 0);
	if (!start || !start->timestamp)
		return;
	delta = now - start->timestamp;
	start->timestamp = 0;
	if (delta < min_block_ns)
		return;
	if (next->flags & PF_NO_USER_STACK)
		record_at_switch_in(next, start->pid, start->tid, delta, 0, -1, NOT_WALKED, NULL, NULL);
	else
		defer_user_stack(next, start->pid, start->tid, delta);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	struct sampler_config *cfg;
	u32 zero = 0;
	/* One timestamp for both ends, so the program's cost is charged to neither thread. */
	u64 now = bpf_ktime_get_ns();

	if (!preempt && prev_state != TASK_RUNNING) {
		cfg = bpf_map_lookup_elem(&config, &zero);
		if (cfg)
			switch_out(now, prev, cfg);
	}
	switch_in(now, next);
	return 0;
}

/*
 * A thread's task is freed: drop its pending wait, if any (its task work can
 * no longer run: the thread exited between its wake-up and its return to
 * user space, after its task works ran). Its start goes with its task storage.
 */
SEC("tp_btf/sched_process_free")
int BPF_PROG(offcpu_free, struct task_struct *p)
{
	u32 tid = p->pid;

	bpf_map_delete_elem(&pending, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
