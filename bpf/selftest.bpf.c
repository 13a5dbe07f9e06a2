//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A test-only program (never attached) that runs the stack store and count
 * helpers of stackstore.h and common.h through BPF_PROG_TEST_RUN, so their
 * handling of helper errors is checked on each kernel of the matrix: the
 * same frames stored twice must get the same id, the same key counted twice
 * must add up, a full stack map must say -E2BIG, and stack losses must be
 * counted under their reason.
 */
#include "common.h"
#include "stackstore.h"

typedef u64 frames_t[MAX_STACK_DEPTH];

/* Results of one run, read by the test. */
struct selftest_result {
	s32 first_id;	/* store_stack of frames */
	s32 second_id;	/* store_stack of the same frames again */
	s32 other_id;	/* store_stack of other frames */
	s32 full_id;	/* store_stack into the full one-entry map */
	s32 add_first;	/* add_delta of a new key */
	s32 add_second; /* add_delta of the same key */
	u64 count;	/* the key's total after both */
	/* count_stack_loss of full_id, -EEXIST, -EFAULT, -1 and first_id */
	u64 lost[NR_STACK_LOSSES];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, frames_t);
} test_stacks SEC(".maps");

/* Holds one stack already: any other is refused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, frames_t);
} test_full SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, struct stack_key);
	__type(value, u64);
} test_counts SEC(".maps");

/* Index 0: frames; index 1: other frames (both written by the test). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, frames_t);
} test_frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct selftest_result);
} test_result SEC(".maps");

SEC("socket")
int run_selftest(void *ctx)
{
	struct stack_key key = { .pid = 1, .tid = 2, .user_stack_id = 3, .kernel_stack_id = 4, .trace_attrs_id = -1 };
	struct selftest_result *res;
	u32 zero = 0, one = 1;
	u64 *frames, *other, *total;

	res = bpf_map_lookup_elem(&test_result, &zero);
	frames = bpf_map_lookup_elem(&test_frames, &zero);
	other = bpf_map_lookup_elem(&test_frames, &one);
	if (!res || !frames || !other)
		return 0;
	res->first_id = store_stack(&test_stacks, frames, hash_frames(frames, 8));
	res->second_id = store_stack(&test_stacks, frames, hash_frames(frames, 8));
	res->other_id = store_stack(&test_stacks, other, hash_frames(other, 8));
	res->full_id = store_stack(&test_full, other, hash_frames(other, 8));
	res->add_first = add_delta(&test_counts, &key, 5);
	res->add_second = add_delta(&test_counts, &key, 7);
	total = bpf_map_lookup_elem(&test_counts, &key);
	res->count = total ? *total : 0;
	count_stack_loss(res->lost, res->full_id);
	count_stack_loss(res->lost, -EEXIST);
	count_stack_loss(res->lost, -EFAULT);
	count_stack_loss(res->lost, -1);
	count_stack_loss(res->lost, res->first_id);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
