/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps internal/stackdrain drains, shared by the CPU and off-CPU
 * programs: two generations of (counts, stacks) and of stats, the config
 * selecting the generation written, the per-CPU in-flight sequence, thread
 * names and the target pid filter. See the header comment of cpu.bpf.c for
 * the double-buffering protocol.
 */
#ifndef BPFPROFILER_DRAINMAPS_H
#define BPFPROFILER_DRAINMAPS_H

#include "common.h"

#define MAX_COUNT_ENTRIES 16384
#define MAX_STACK_ENTRIES 8192
#define MAX_THREADS 16384
#define MAX_TARGETS 4096

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_COUNT_ENTRIES);
	__type(key, struct stack_key);
	__type(value, u64);
} counts_0 SEC(".maps"), counts_1 SEC(".maps");

/* Stack id (frame hash) -> frames, zero-padded. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACK_ENTRIES);
	__type(key, u32);
	__type(value, stack_trace_t);
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

/* The counters count_event can add to. */
enum stats_counter {
	STATS_LOST_MAP_FULL,
	STATS_NEW_PID_DROPS,
};

/*
 * Adds one to counter of the current generation's stats, inside the
 * inflight protocol like a record (see cpu.bpf.c), for an event that stores
 * nothing else.
 */
static __always_inline void count_event(enum stats_counter counter)
{
	struct sampler_config *cfg;
	struct sampler_stats *st;
	struct inflight_seq *in;
	u32 zero = 0, gen;

	in = bpf_map_lookup_elem(&inflight, &zero);
	if (!in)
		return;
	__sync_fetch_and_add(&in->enter, 1);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (cfg) {
		gen = cfg->generation & 1;
		st = bpf_map_lookup_elem(&stats, &gen);
		if (st && counter == STATS_LOST_MAP_FULL)
			st->lost_map_full++;
		else if (st)
			st->new_pid_drops++;
	}
	__sync_fetch_and_add(&in->exit, 1);
}

#endif /* BPFPROFILER_DRAINMAPS_H */
