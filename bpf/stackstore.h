/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Stacks stored by content in a BPF_MAP_TYPE_HASH (u32 id -> frames): the
 * id is a hash of the frames, and an id already taken by other frames is
 * resolved by probing the next ids, so a stack is never replaced nor
 * confused with another (unlike bpf_get_stackid, which returns -EEXIST on a
 * bucket collision and loses the stack).
 */
#ifndef BPFPROFILER_STACKSTORE_H
#define BPFPROFILER_STACKSTORE_H

#include "common.h"

/* Ids tried for one stack before it is given up as a collision. */
#define STACK_PROBES 4

/*
 * Hash of zero-padded frames, as a non-negative stack id. bytes is what
 * bpf_get_task_stack returned; a negative value (an error) is passed through.
 */
static __always_inline s32 hash_frames(const u64 *frames, int bytes)
{
	u64 h = 0xcbf29ce484222325ULL;

	if (bytes < 0)
		return bytes;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		if (!frames[i])
			break;
		h ^= frames[i];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return (s32)((h ^ (h >> 32)) & 0x7fffffff);
}

static __always_inline int same_frames(const u64 *a, const u64 *b)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		if (a[i] != b[i])
			return 0;
		if (!a[i])
			break;
	}
	return 1;
}

/*
 * Stores frames (a map value, zero-padded) under their hash in stacks and
 * returns the id they are stored under, or a negative error: the one of the
 * capture (hash < 0), -E2BIG when the map is full, -EEXIST when STACK_PROBES
 * ids were taken by other stacks.
 */
static __always_inline s32 store_stack(void *stacks, const u64 *frames, s32 hash)
{
	if (hash < 0)
		return hash;
#pragma clang loop unroll(disable)
	for (int probe = 0; probe < STACK_PROBES; probe++) {
		u32 id = ((u32)hash + probe) & 0x7fffffff;
		const u64 *old;
		int err; /* int on every kernel: see common.h */

		err = bpf_map_update_elem(stacks, &id, frames, BPF_NOEXIST);
		if (!err)
			return id;
		if (err != -EEXIST)
			return err;
		old = bpf_map_lookup_elem(stacks, &id);
		if (old && same_frames(old, frames))
			return id;
	}
	return -EEXIST;
}

/*
 * Counts, for a recorded key, a stack it carries no frames for: id is the
 * key's stack id, -1 (no stack to take, e.g. the user stack of a kernel
 * thread) is not a loss.
 */
static __always_inline void count_stack_loss(u64 *lost, s32 id)
{
	if (id >= -1)
		return;
	if (id == -E2BIG)
		lost[STACK_LOSS_MAP_FULL]++;
	else if (id == -EEXIST)
		lost[STACK_LOSS_COLLISION]++;
	else
		lost[STACK_LOSS_FAILED]++;
}

#endif /* BPFPROFILER_STACKSTORE_H */
