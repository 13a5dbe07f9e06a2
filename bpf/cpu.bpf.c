//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * On-CPU sampling: attached to one cpu-clock perf event per CPU, counts
 * (pid, tid, user stack id, kernel stack id) and stores the stacks.
 *
 * Stacks are stored by content like offcpu.bpf.c (stackstore.h): captured
 * with bpf_get_stack into a per-CPU scratch buffer, then kept in a
 * BPF_MAP_TYPE_HASH (stacks_N) under a hash of their frames, so a stack is
 * never lost to a bucket collision as with bpf_get_stackid.
 *
 * Draining is double-buffered: there are two sets of maps (counts_N, stacks_N).
 * config.generation selects the set the program writes. To drain, user space
 * 1. writes the other generation into config,
 * 2. waits until on every CPU no invocation that may have read the old
 *    generation is still running (per-CPU inflight.enter/exit sequence; one
 *    perf_event program per CPU at a time, they do not nest),
 * 3. reads and clears the now idle set, which no program writes any more.
 * Nothing is lost or double-counted across a drain. The stats counters are
 * kept per generation too (stats[generation]), so the counters user space
 * reads and zeroes describe exactly the samples it drained.
 *
 * New processes are announced at their first sample (announce.h).
 *
 * Threads of runtimes walked apart (CPython) also have their frames read
 * (apart.h) and stored as a third stack of the key; a thread inside an
 * open probe scope puts that scope into the key (scopes.h).
 */
#include "common.h"
#include "stackstore.h"
#include "drainmaps.h"
#include "announce.h"
#include "unwind_walk.h"
#include "apart.h"
#include "scopes.h"
#include "threadctx.h"

/* Per-CPU capture buffer of the stack being stored (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, stack_trace_t);
} scratch SEC(".maps");

/* Stores the current thread's name (see store_comm). */
static __always_inline void remember_comm(u32 tid)
{
	struct thread_comm cur = {};

	if (!bpf_get_current_comm(cur.comm, sizeof(cur.comm)))
		store_comm(&comms, tid, &cur);
}

/*
 * Captures the current stack (user or kernel, per flags) into frames and
 * stores it; returns its id or a negative error. An empty capture is -EFAULT
 * (what bpf_get_stackid returns for it). bpf_get_stack zero-fills the unused
 * tail of frames (all of it on error), so hashing and comparing stop at the
 * last frame and the stored value is zero-padded.
 */
static __always_inline s32 capture_stack(struct bpf_perf_event_data *ctx, void *stacks, u64 *frames, u64 flags)
{
	int n = bpf_get_stack(ctx, frames, sizeof(stack_trace_t), flags); /* int: see common.h */

	if (n == 0)
		n = -EFAULT;
	return store_stack(stacks, frames, hash_frames(frames, n));
}

#if defined(__TARGET_ARCH_arm64)
/*
 * The user stack by frame pointers (before the process's tables load), and
 * arm64's leaf caller: bpf_get_stack follows the frame records from x29,
 * so a function that has not saved x30 in one (a leaf; any function in its
 * prologue or epilogue) loses its caller, which x30 alone holds. When x30
 * is not the records' first return address, it follows the pc as a
 * LINK_REGISTER_WORD (arch.h), the stack taken again one slot on; user
 * space keeps it where it is in another function than the pc
 * (internal/assemble): after a call, x30 points into the pc's own function.
 */
static __always_inline s32 capture_user_stack(struct bpf_perf_event_data *ctx, struct task_struct *task, void *stacks,
					      u64 *frames)
{
	int n = bpf_get_stack(ctx, frames, sizeof(stack_trace_t), BPF_F_USER_STACK); /* int: see common.h */
	struct user_regs regs;
	u64 lr;
	int m;

	if (n > 0 && !sample_user_regs(ctx, task, &regs)) {
		lr = RETURN_ADDRESS(regs.lr);
		if (lr && lr != frames[1] && lr != frames[0]) {
			m = bpf_get_stack(ctx, frames + 1, sizeof(stack_trace_t) - sizeof(u64), BPF_F_USER_STACK);
			if (m > 0) {
				frames[0] = frames[1];
				frames[1] = LINK_REGISTER_WORD(lr);
				n = m + sizeof(u64);
			}
		}
	}
	if (n == 0)
		n = -EFAULT;
	return store_stack(stacks, frames, hash_frames(frames, n));
}
#else
static __always_inline s32 capture_user_stack(struct bpf_perf_event_data *ctx, struct task_struct *task, void *stacks,
					      u64 *frames)
{
	return capture_stack(ctx, stacks, frames, BPF_F_USER_STACK);
}
#endif

/* A sample whose user stack is being walked with unwind tables (unwind.h). */
struct walk_state {
	struct stack_key key;
	struct unwind_walk walk;
	u32 gen;
	u32 host_tgid;
	u32 task_flags;
	u32 reserved; /* explicit padding */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct walk_state);
} walks SEC(".maps");

int walk_user_stack(struct bpf_perf_event_data *ctx);

/* Slot 0: walk_user_stack, which tail-calls itself until the walk ends. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__array(values, int(struct bpf_perf_event_data *));
} walk_progs SEC(".maps") = {
	.values = { [0] = (void *)&walk_user_stack },
};

/*
 * Completes a record once its user stack is taken: the kernel and runtime
 * stacks, the count, the counters, the thread name and the announcement.
 */
static __always_inline void finish(struct bpf_perf_event_data *ctx, void *counts, void *stacks, struct stack_key *key,
				   struct sampler_stats *st, u64 *frames, u32 host_tgid, unsigned int flags)
{
	struct apart_stack rs;
	u64 g;

	key->kernel_stack_id = capture_stack(ctx, stacks, frames, 0);
	/* -EFAULT: the sample hit user mode, so there is no kernel stack. */
	if (key->kernel_stack_id == -EFAULT)
		key->kernel_stack_id = -1;
	apart_last_walk(&rs); /* walked by sample_cpu */
	key->runtime_stack_id = apart_store(stacks, &rs, st, key);
	g = thread_ctx_store(key, st); /* read by sample_cpu */
	scope_of((u32)bpf_get_current_pid_tgid(), host_tgid, g, key);

	if (add_delta(counts, key, 1)) {
		st->lost_map_full++;
		return;
	}
	/*
	 * A sample whose stack could not be stored is still recorded (its key
	 * carries the error, which user space turns into a marker frame), so
	 * process totals stay right; the loss is counted by reason.
	 */
	st->recorded++;
	count_stack_loss(st->user_stack_lost, key->user_stack_id);
	count_stack_loss(st->kernel_stack_lost, key->kernel_stack_id);
	remember_comm(key->tid);
	announce(host_tgid, key->pid, flags, st);
}

/*
 * Hands the sample to walk_user_stack when unwind tables of the process are
 * loaded (the address sampled is in one of its known mappings). Returns only
 * when it does not: the caller then takes the stack with frame pointers.
 */
static __always_inline void walk_with_tables(struct bpf_perf_event_data *ctx, struct task_struct *task,
					     struct stack_key *key, u32 gen, u32 host_tgid, unsigned int flags,
					     struct sampler_stats *st)
{
	struct walk_state *w;
	u32 zero = 0;

	w = bpf_map_lookup_elem(&walks, &zero);
	if (!w || sample_user_regs(ctx, task, &w->walk.regs))
		return;
	if (unwind_walk_start(&w->walk, key->pid)) {
		if (unwind_tables)
			request_rescan(host_tgid, key->pid, st);
		return;
	}
	w->key = *key;
	w->gen = gen;
	w->host_tgid = host_tgid;
	w->task_flags = flags;
	bpf_tail_call(ctx, &walk_progs, 0);
}

/* Records the sample of the current thread, key->pid and key->tid set, in generation gen's maps. */
static __always_inline void record(struct bpf_perf_event_data *ctx, u32 gen, void *counts, void *stacks,
				   struct stack_key *key)
{
	u32 host_tgid = bpf_get_current_pid_tgid() >> 32;
	struct sampler_stats *st;
	struct task_struct *task;
	unsigned int flags;
	u32 zero = 0;
	u64 *frames;

	st = bpf_map_lookup_elem(&stats, &gen);
	frames = bpf_map_lookup_elem(&scratch, &zero);
	if (!st || !frames)
		return;

	/*
	 * Kernel threads have no user stack (the capture would fail), so it is
	 * not requested and not counted as an error.
	 */
	task = (struct task_struct *)bpf_get_current_task();
	flags = BPF_CORE_READ(task, flags);
	key->user_stack_id = -1;
	if (!(flags & PF_KTHREAD)) {
		walk_with_tables(ctx, task, key, gen, host_tgid, flags, st);
		key->user_stack_id = capture_user_stack(ctx, task, stacks, frames);
	}
	finish(ctx, counts, stacks, key, st, frames, host_tgid, flags);
}

/*
 * Whether the current thread is sampled (not idle, passes the filter); sets
 * key->pid and key->tid as the collector sees them.
 */
static __always_inline int sampled(const struct sampler_config *cfg, struct stack_key *key)
{
	if ((bpf_get_current_pid_tgid() >> 32) == 0) /* idle */
		return 0;
	if (current_ids(cfg, &key->pid, &key->tid))
		return 0;
	return !cfg->filter_enabled || bpf_map_lookup_elem(&target_pids, &key->pid);
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	struct sampler_config *cfg;
	struct inflight_seq *in;
	struct stack_key key = {};
	u32 zero = 0;

	in = bpf_map_lookup_elem(&inflight, &zero);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!in || !cfg)
		return 0;

	/*
	 * Atomic add: a full barrier before config is read on x86 (lock add);
	 * relaxed on arm64, where the drain's grace after the flip (1 ms,
	 * internal/stackdrain) lets the increment become visible first.
	 */
	__sync_fetch_and_add(&in->enter, 1);
	if (sampled(cfg, &key)) {
		u64 pc, vm;

		/* Once, before either generation's path: finish reads them. */
		apart_regs(user_mode_regs((const u64 *)ctx) ? (const u64 *)ctx : 0, &pc, &vm);
		apart_walk_current(key.pid, pc, vm);
		thread_ctx_read(key.pid, user_mode_regs((const u64 *)ctx) ? (const u64 *)ctx : 0);
		if (cfg->generation & 1)
			record(ctx, 1, &counts_1, &stacks_1, &key);
		else
			record(ctx, 0, &counts_0, &stacks_0, &key);
	}
	/* Not reached when walk_user_stack took over the sample: it exits. */
	__sync_fetch_and_add(&in->exit, 1);
	return 0;
}

/* Stores the walked stack of w and completes its record. */
static __always_inline void finish_walk(struct bpf_perf_event_data *ctx, struct walk_state *w, u64 *frames, int end,
					void *counts, void *stacks)
{
	struct sampler_stats *st = bpf_map_lookup_elem(&stats, &w->gen);
	u32 n = unwind_walk_end(&w->walk, frames);

	if (!st)
		return;
	if (end >= 0 && end < NR_UNWIND_ENDS)
		st->unwind_ends[end]++;
	if (end == UNWIND_END_NO_MAPPING)
		request_rescan(w->host_tgid, w->key.pid, st);
	st->unwind_frames += n;
	w->key.user_stack_id = store_stack(stacks, frames, hash_frames(frames, n * sizeof(u64)));
	finish(ctx, counts, stacks, &w->key, st, frames, w->host_tgid, w->task_flags);
}

SEC("perf_event")
int walk_user_stack(struct bpf_perf_event_data *ctx)
{
	struct inflight_seq *in;
	struct walk_state *w;
	u32 zero = 0;
	u64 *frames;
	int end;

	in = bpf_map_lookup_elem(&inflight, &zero);
	w = bpf_map_lookup_elem(&walks, &zero);
	frames = bpf_map_lookup_elem(&scratch, &zero);
	if (!in)
		return 0; /* never: every array has its element */
	if (!w || !frames)
		goto out;

	end = unwind_walk_some(&w->walk, frames);
	if (end < 0 && w->walk.calls < UNWIND_WALK_CALLS) {
		w->walk.calls++;
		bpf_tail_call(ctx, &walk_progs, 0);
	}
	if (end < 0)
		end = UNWIND_END_DEPTH;
	if (w->gen & 1)
		finish_walk(ctx, w, frames, end, &counts_1, &stacks_1);
	else
		finish_walk(ctx, w, frames, end, &counts_0, &stacks_0);
out:
	/* sample_cpu counted the entry; the sample ends here. */
	__sync_fetch_and_add(&in->exit, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
