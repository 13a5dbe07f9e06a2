/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Open probe scopes, by thread: probe.bpf.c writes a thread's outermost
 * open scope of a probe that links samples (probe_config.link_samples) and
 * removes it when that scope ends; the CPU and off-CPU programs read it to
 * put the scope into the key of the samples the thread records meanwhile.
 * User space shares one map between the collections (map replacement);
 * a collection that links nothing keeps its own one-entry map unread.
 */
#ifndef BPFPROFILER_SCOPES_H
#define BPFPROFILER_SCOPES_H

#include "common.h"

#define MAX_OPEN_SCOPES 65536

/* The outermost open scope of a thread. */
struct open_scope {
	u64 start_ns; /* bpf_ktime_get_ns at its entry: with the thread and probe, names the scope */
	u32 probe;    /* probe index + 1 */
	u32 reserved; /* explicit padding, always 0 */
};

/* LRU: should a removal ever be missed, old entries make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OPEN_SCOPES);
	__type(key, u32); /* host thread id */
	__type(value, struct open_scope);
} open_scopes SEC(".maps");

/* Non-zero when open_scopes is the probes' map (the samplers read it); set at load time. */
const volatile u32 link_scopes = 0;

/* Puts the open scope of host thread tid, if any, into key. */
static __always_inline void scope_of(u32 tid, struct stack_key *key)
{
	struct open_scope *s;

	if (!link_scopes)
		return;
	s = bpf_map_lookup_elem(&open_scopes, &tid);
	if (!s)
		return;
	key->scope_probe = s->probe;
	key->scope_start_ns = s->start_ns;
}

#endif /* BPFPROFILER_SCOPES_H */
