/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Open probe scopes, by thread: probe.bpf.c writes a thread's outermost
 * open scope of a probe that links samples (probe_config.link_samples) and
 * removes it when that scope ends; the CPU and off-CPU programs read it to
 * put the scope into the key of the samples the thread records meanwhile.
 * A Go function's scope is its goroutine's (go_open_scopes, by tgid and
 * g): a sample links to it through the goroutine the thread runs (its
 * m.curg, threadctx.h), whichever thread that is, and carries
 * SCOPE_GOROUTINE. User space shares the maps between the collections (map
 * replacement); a collection that links nothing keeps its own one-entry
 * maps unread.
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

/* A goroutine: its process's host tgid and its g. */
struct goroutine_ref {
	u32 tgid;
	u32 reserved; /* explicit padding, always 0 */
	u64 g;
};

/* The outermost open scope of a goroutine; LRU as open_scopes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OPEN_SCOPES);
	__type(key, struct goroutine_ref);
	__type(value, struct open_scope);
} go_open_scopes SEC(".maps");

/*
 * stack_key.scope_probe's bit for a goroutine's scope: its record may name
 * another thread than the sample's (user space joins it by process, probe
 * and start).
 */
#define SCOPE_GOROUTINE 0x80000000u

/* Non-zero when open_scopes is the probes' map (the samplers read it); set at load time. */
const volatile u32 link_scopes = 0;

/*
 * Puts the open scope of host thread tid, if any, into key; else that of
 * goroutine g (0: the thread runs none known) of process tgid (host ids).
 */
static __always_inline void scope_of(u32 tid, u32 tgid, u64 g, struct stack_key *key)
{
	struct goroutine_ref ref = { .tgid = tgid, .g = g };
	struct open_scope *s;
	u32 goroutine = 0;

	if (!link_scopes)
		return;
	s = bpf_map_lookup_elem(&open_scopes, &tid);
	if (!s && g) {
		s = bpf_map_lookup_elem(&go_open_scopes, &ref);
		goroutine = SCOPE_GOROUTINE;
	}
	if (!s)
		return;
	key->scope_probe = s->probe | goroutine;
	key->scope_start_ns = s->start_ns;
}

#endif /* BPFPROFILER_SCOPES_H */
