//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * On-CPU sampling: attached to one cpu-clock perf event per CPU, counts
 * (pid, tid, user stack id, kernel stack id) and stores the stacks.
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
 */
#include "common.h"

#define MAX_COUNT_ENTRIES 16384
#define MAX_STACK_ENTRIES 8192
#define MAX_THREADS 16384
#define MAX_TARGETS 4096

typedef u64 stack_trace_t[MAX_STACK_DEPTH];

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_COUNT_ENTRIES);
	__type(key, struct stack_key);
	__type(value, u64);
} counts_0 SEC(".maps"), counts_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_STACK_ENTRIES);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(stack_trace_t));
} stacks_0 SEC(".maps"), stacks_1 SEC(".maps");

/* tid -> thread name; names outlive their threads until evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, u32);
	__type(value, struct thread_comm);
} comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct sampler_config);
} config SEC(".maps");

/* tgid (as the collector sees it) -> 1; consulted only when config.filter_enabled is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, u32);
	__type(value, u8);
} target_pids SEC(".maps");

/* Indexed by generation. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct sampler_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct inflight_seq);
} inflight SEC(".maps");

/* Stores the current thread's name (see store_comm). */
static __always_inline void remember_comm(u32 tid)
{
	struct thread_comm cur = {};

	if (!bpf_get_current_comm(cur.comm, sizeof(cur.comm)))
		store_comm(&comms, tid, &cur);
}

static __always_inline void record(struct bpf_perf_event_data *ctx, u32 gen, void *counts, void *stacks,
				   const struct sampler_config *cfg)
{
	u64 id = bpf_get_current_pid_tgid();
	struct stack_key key = {};
	struct sampler_stats *st;
	struct task_struct *task;

	if ((id >> 32) == 0) /* idle */
		return;
	if (current_ids(cfg, &key.pid, &key.tid))
		return;
	if (cfg->filter_enabled && !bpf_map_lookup_elem(&target_pids, &key.pid))
		return;
	st = bpf_map_lookup_elem(&stats, &gen);
	if (!st)
		return;

	/*
	 * Kernel threads have no user stack (bpf_get_stackid returns -EFAULT),
	 * so it is not requested and not counted as an error.
	 */
	task = (struct task_struct *)bpf_get_current_task();
	key.user_stack_id = -1;
	if (!(BPF_CORE_READ(task, flags) & PF_KTHREAD)) {
		key.user_stack_id = bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK);
		if (key.user_stack_id < 0)
			st->user_stack_errors++;
	}
	/* -EFAULT: the sample hit user mode, so there is no kernel stack. */
	key.kernel_stack_id = bpf_get_stackid(ctx, stacks, 0);
	if (key.kernel_stack_id == -EFAULT)
		key.kernel_stack_id = -1;
	else if (key.kernel_stack_id < 0)
		st->kernel_stack_errors++;

	if (add_delta(counts, &key, 1)) {
		st->lost_map_full++;
		return;
	}
	st->recorded++;
	remember_comm(key.tid);
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
