//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Off-CPU time: on tp_btf/sched_switch, a targeted thread that goes to sleep
 * (prev) gets its timestamp and stack ids stored by thread id; when it is
 * switched back in (next, on any CPU) the time it was away is added to
 * (pid, tid, user stack id, kernel stack id) if it is at least min_block_ns.
 *
 * Only voluntary sleeps are recorded: a thread preempted while runnable
 * (preempt, or prev_state == TASK_RUNNING) is waiting on a runqueue, not
 * blocked, and is left to the CPU profile's view of contention.
 *
 * The counts/stacks/stats maps are double-buffered exactly like cpu.bpf.c
 * (see there). One twist: stack ids are taken at switch-out, into the stack
 * map of the generation current then (start.generation), and a wait may
 * span a drain. Such a wait is counted in the current generation with its
 * stack ids marked STACK_ID_OTHER_GENERATION: user space looks those up in
 * the other stack map, and keeps (does not clear) the stacks of a drained
 * generation that pending starts or such marked counts still reference.
 */
#include "common.h"
#include <bpf/bpf_tracing.h>

#define MAX_COUNT_ENTRIES 16384
#define MAX_STACK_ENTRIES 8192
#define MAX_THREADS 16384
#define MAX_TARGETS 4096
#define MAX_EXCLUDED 64

/* Set on a non-negative stack id that refers to the other generation's stack map. */
#define STACK_ID_OTHER_GENERATION 0x40000000

typedef u64 stack_trace_t[MAX_STACK_DEPTH];

/* A thread that went to sleep, stored by host tid until it runs again. */
struct offcpu_start {
	u64 timestamp; /* bpf_ktime_get_ns at switch-out */
	u32 pid;       /* tgid as the collector sees it (see current_ids) */
	u32 tid;       /* tid as the collector sees it */
	u32 generation;
	s32 user_stack_id;
	s32 kernel_stack_id;
	u32 reserved; /* explicit padding */
};

/* Blocks shorter than this are not recorded; set at load time. */
const volatile u64 min_block_ns = 0;

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

/* tid -> sleep start; LRU so threads that never run again cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, u32);
	__type(value, struct offcpu_start);
} starts SEC(".maps");

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

/* tgid (as the collector sees it) -> 1: never recorded (the collector itself). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EXCLUDED);
	__type(key, u32);
	__type(value, u8);
} excluded_pids SEC(".maps");

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

/* prev (current) goes to sleep: remember when, and where (its stacks). */
static __always_inline void switch_out(void *ctx, u64 now, struct task_struct *prev, u32 gen, void *stacks,
				       const struct sampler_config *cfg)
{
	struct offcpu_start start = {};
	struct sampler_stats *st;
	u32 tid = prev->pid;

	if (prev->tgid == 0) /* idle */
		return;
	/* prev is still current here, so its ids can be translated. */
	if (current_ids(cfg, &start.pid, &start.tid))
		return;
	if (cfg->filter_enabled && !bpf_map_lookup_elem(&target_pids, &start.pid))
		return;
	if (bpf_map_lookup_elem(&excluded_pids, &start.pid))
		return;
	st = bpf_map_lookup_elem(&stats, &gen);
	if (!st)
		return;

	start.generation = gen;
	start.user_stack_id = -1;
	if (!(prev->flags & PF_KTHREAD)) {
		start.user_stack_id = bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK);
		if (start.user_stack_id < 0)
			st->user_stack_errors++;
	}
	start.kernel_stack_id = bpf_get_stackid(ctx, stacks, 0);
	if (start.kernel_stack_id < 0)
		st->kernel_stack_errors++;
	start.timestamp = now;
	bpf_map_update_elem(&starts, &tid, &start, BPF_ANY);
}

static __always_inline s32 mark_other(s32 id)
{
	return id < 0 ? id : id | STACK_ID_OTHER_GENERATION;
}

static __always_inline void remember_comm(struct task_struct *task, u32 tid)
{
	struct thread_comm cur = {};
	struct thread_comm *old;
	int diff = 0;

	if (bpf_probe_read_kernel_str(cur.comm, sizeof(cur.comm), task->comm) < 0)
		return;
	old = bpf_map_lookup_elem(&comms, &tid);
	if (old) {
#pragma unroll
		for (int i = 0; i < TASK_COMM_LEN; i++)
			diff |= old->comm[i] ^ cur.comm[i];
		if (!diff)
			return;
	}
	bpf_map_update_elem(&comms, &tid, &cur, BPF_ANY);
}

/* Adds delta to counts[key]; returns 0 when it was counted. */
static __always_inline int add_delta(void *counts, struct stack_key *key, u64 delta)
{
	u64 *total;
	long err;

	total = bpf_map_lookup_elem(counts, key);
	if (total) {
		__sync_fetch_and_add(total, delta);
		return 0;
	}
	err = bpf_map_update_elem(counts, key, &delta, BPF_NOEXIST);
	if (err == -EEXIST) {
		total = bpf_map_lookup_elem(counts, key);
		if (total)
			__sync_fetch_and_add(total, delta);
		return 0;
	}
	return err ? -1 : 0;
}

/* next runs again: count how long it was away. */
static __always_inline void switch_in(u64 now, struct task_struct *next, u32 gen, void *counts)
{
	struct offcpu_start *start;
	struct sampler_stats *st;
	struct stack_key key = {};
	u64 delta;
	u32 tid = next->pid;

	if (tid == 0)
		return;
	start = bpf_map_lookup_elem(&starts, &tid);
	if (!start)
		return;
	delta = now - start->timestamp;
	key.pid = start->pid;
	key.tid = start->tid;
	key.user_stack_id = start->user_stack_id;
	key.kernel_stack_id = start->kernel_stack_id;
	if (start->generation != gen) {
		key.user_stack_id = mark_other(key.user_stack_id);
		key.kernel_stack_id = mark_other(key.kernel_stack_id);
	}
	/*
	 * The count is written before the start is deleted: a drain that no
	 * longer finds the start (to keep its stacks) then finds the count.
	 */
	st = bpf_map_lookup_elem(&stats, &gen);
	if (st && delta >= min_block_ns) {
		if (add_delta(counts, &key, delta)) {
			st->lost_map_full++;
		} else {
			st->recorded++;
			remember_comm(next, key.tid);
		}
	}
	bpf_map_delete_elem(&starts, &tid);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	struct sampler_config *cfg;
	struct inflight_seq *in;
	u32 zero = 0;
	int sleeps = !preempt && prev_state != TASK_RUNNING;
	/*
	 * One timestamp for both ends, taken before the stack capture, so its
	 * cost is charged to neither the sleeping nor the waking thread.
	 */
	u64 now = bpf_ktime_get_ns();

	in = bpf_map_lookup_elem(&inflight, &zero);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!in || !cfg)
		return 0;

	/* Atomic add: a full barrier before config is read (x86 lock add). */
	__sync_fetch_and_add(&in->enter, 1);
	if (cfg->generation & 1) {
		if (sleeps)
			switch_out(ctx, now, prev, 1, &stacks_1, cfg);
		switch_in(now, next, 1, &counts_1);
	} else {
		if (sleeps)
			switch_out(ctx, now, prev, 0, &stacks_0, cfg);
		switch_in(now, next, 0, &counts_0);
	}
	__sync_fetch_and_add(&in->exit, 1);
	return 0;
}

/* A thread's task is freed: it never runs again, drop its start if any. */
SEC("tp_btf/sched_process_free")
int BPF_PROG(offcpu_free, struct task_struct *p)
{
	u32 tid = p->pid;

	bpf_map_delete_elem(&starts, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
