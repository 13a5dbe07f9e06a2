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
 * New processes: the first sample of a user process (host tgid not in
 * seen_pids) sends its pid, as the collector sees it, through the new_pids
 * ring buffer, so user space can read its mappings while it still runs.
 * cpu_process_exit forgets the tgid once the whole thread group is exiting,
 * so a reused pid is announced again.
 */
#include "common.h"
#include "stackstore.h"
#include "drainmaps.h"
#include <bpf/bpf_tracing.h>

#define MAX_SEEN_PIDS 16384
#define NEW_PIDS_BYTES (16 * 1024)

/* Per-CPU capture buffer of the stack being stored (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, stack_trace_t);
} scratch SEC(".maps");

/* Host tgids already announced in new_pids. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SEEN_PIDS);
	__type(key, u32);
	__type(value, u8);
} seen_pids SEC(".maps");

/* Pids (u32, as the collector sees them) of newly sampled processes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, NEW_PIDS_BYTES);
} new_pids SEC(".maps");

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

/*
 * Announces a process on its first sample: inserts its host tgid in
 * seen_pids and sends pid (as the collector sees it) to new_pids. When the
 * ring buffer is full the drop is counted and the tgid forgotten again, so
 * a later sample retries. Exiting threads announce nothing: their group may
 * already have been forgotten by cpu_process_exit, and must stay so.
 */
static __always_inline void announce(u32 host_tgid, u32 pid, struct sampler_stats *st)
{
	u8 one = 1;
	u32 *rec;

	if (bpf_map_lookup_elem(&seen_pids, &host_tgid))
		return;
	/* Another CPU inserted it first: it announces. */
	if (bpf_map_update_elem(&seen_pids, &host_tgid, &one, BPF_NOEXIST))
		return;
	rec = bpf_ringbuf_reserve(&new_pids, sizeof(*rec), 0);
	if (!rec) {
		st->new_pid_drops++;
		bpf_map_delete_elem(&seen_pids, &host_tgid);
		return;
	}
	*rec = pid;
	/*
	 * New processes are rare next to samples: wake the reader at once, so
	 * it reads the process's maps while it still runs, and it needs no
	 * polling when the host is idle.
	 */
	bpf_ringbuf_submit(rec, 0);
}

static __always_inline void record(struct bpf_perf_event_data *ctx, u32 gen, void *counts, void *stacks,
				   const struct sampler_config *cfg)
{
	u64 id = bpf_get_current_pid_tgid();
	struct stack_key key = {};
	struct sampler_stats *st;
	struct task_struct *task;
	unsigned int flags;
	u32 zero = 0;
	u64 *frames;

	if ((id >> 32) == 0) /* idle */
		return;
	if (current_ids(cfg, &key.pid, &key.tid))
		return;
	if (cfg->filter_enabled && !bpf_map_lookup_elem(&target_pids, &key.pid))
		return;
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
	key.user_stack_id = -1;
	if (!(flags & PF_KTHREAD))
		key.user_stack_id = capture_stack(ctx, stacks, frames, BPF_F_USER_STACK);
	/* -EFAULT: the sample hit user mode, so there is no kernel stack. */
	key.kernel_stack_id = capture_stack(ctx, stacks, frames, 0);
	if (key.kernel_stack_id == -EFAULT)
		key.kernel_stack_id = -1;

	if (add_delta(counts, &key, 1)) {
		st->lost_map_full++;
		return;
	}
	/*
	 * A sample whose stack could not be stored is still recorded (its key
	 * carries the error, which user space turns into a marker frame), so
	 * process totals stay right; the loss is counted by reason.
	 */
	st->recorded++;
	count_stack_loss(st->user_stack_lost, key.user_stack_id);
	count_stack_loss(st->kernel_stack_lost, key.kernel_stack_id);
	remember_comm(key.tid);
	/* Kernel threads have nothing to symbolize. */
	if (!(flags & (PF_KTHREAD | PF_EXITING)))
		announce(id >> 32, key.pid, st);
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	struct sampler_config *cfg;
	struct inflight_seq *in;
	u32 zero = 0;

	in = bpf_map_lookup_elem(&inflight, &zero);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!in || !cfg)
		return 0;

	/* Atomic add: a full barrier before config is read (x86 lock add). */
	__sync_fetch_and_add(&in->enter, 1);
	if (cfg->generation & 1)
		record(ctx, 1, &counts_1, &stacks_1, cfg);
	else
		record(ctx, 0, &counts_0, &stacks_0, cfg);
	__sync_fetch_and_add(&in->exit, 1);
	return 0;
}

/*
 * A thread exits: once no thread of its group is left running (signal->live,
 * decremented before this tracepoint, reached 0), its tgid is forgotten, so
 * the process that reuses the pid is announced. Waiting for the last thread,
 * not the leader, matters: a leader may exit before its threads, and other
 * threads run (and are sampled) until they handle exit_group's kill. Every
 * thread is marked PF_EXITING before it decrements live, so no sample can
 * insert the tgid again after this.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(cpu_process_exit, struct task_struct *p)
{
	u32 tgid = p->tgid;

	if (BPF_CORE_READ(p, signal, live.counter) == 0)
		bpf_map_delete_elem(&seen_pids, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
