//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Duration probes: probe_entry / probe_exit are attached as uprobes (or the
 * exit side as a uretprobe) to user functions; the attach cookie carries the
 * probe index. A per-(thread, probe) depth counter makes nested scopes roll
 * up into the outermost one: only that one is timed, filtered by
 * min_duration_ns and a per-probe rate limit, and sent to user space through
 * the records ringbuf.
 *
 * A probe that links samples also marks the thread's (or goroutine's)
 * outermost open scope in open_scopes (go_open_scopes, scopes.h), which
 * the CPU and off-CPU programs read; a
 * probe with entry stacks captures the user stack at the outermost entry
 * and sends it after the record. A USDT probe with attributes fetches
 * the arguments they name at the outermost entry (usdtargs.h; the entry
 * uprobe's attach cookie has the site's usdt_specs index + 1 in bits 16 to
 * 31, so that a cookie fits the 32-bit constant that replaces it on kernels
 * without attach cookies) and sends them after the record and its entry stack.
 *
 * Thread exit (and exec) removes the thread's scope state, so a reused tid
 * never inherits a stale depth. Exec events also go to user space (execs
 * ringbuf) so probes can be attached to files newly started processes map.
 *
 * Go functions (probe_go_entry / probe_go_exit: uprobes after the stack
 * check and on each return instruction, never a uretprobe, which would
 * write into a stack Go moves) keep their scopes per goroutine instead: a
 * call that blocks resumes on another thread. The goroutine is its g, in
 * the register Go code keeps it in (r14, x28); a scope left without a
 * return (a panic unwinding past the function, or a goroutine ending in
 * one whose g is reused) is found at the next entry that is not deeper in
 * that goroutine's stack than the open scope's, and dropped (counted).
 */
#include "common.h"
#include "scopes.h"
#include "arch.h"
#include "golabelset.h"
#include "usdtargs.h"

#define RECORDS_BYTES (256 * 1024)
/* Wake the reader once a quarter of the records buffer is in use. */
#define RECORDS_WAKEUP_BYTES (RECORDS_BYTES / 4)
#include <bpf/bpf_tracing.h>

#define MAX_PROBES 64
#define MAX_THREAD_SCOPES 65536
/* Threads inside a scope of a probe with entry stacks at once; user space sizes it (1 when unused). */
#define MAX_ENTRY_STACKS 4096

/* Per-probe settings, indexed by probe index; written by user space. */
struct probe_config {
	u64 min_duration_ns;
	u32 main_thread_only;
	u32 link_samples; /* mark open scopes in open_scopes */
	/*
	 * Rate limit (see rate_allows): one record per rate_interval_ns on
	 * average, bursts of rate_burst_ns / rate_interval_ns + 1 records.
	 * rate_interval_ns 0: unlimited.
	 */
	u64 rate_interval_ns;
	u64 rate_burst_ns;
	u32 entry_stack; /* capture the user stack at the outermost entry */
	u32 args;	 /* the number of USDT arguments its records carry (attributes) */
};

/* One completed outermost scope. Times are bpf_ktime_get_ns (CLOCK_MONOTONIC). */
struct probe_record {
	u64 start_ns;
	u64 end_ns;
	u32 pid; /* tgid as the collector sees it (see pidns_dev) */
	u32 tid; /* thread id as the collector sees it */
	u32 probe_index;
	char comm[TASK_COMM_LEN];
	/*
	 * Probes with entry stacks: the number of frames of the entry stack
	 * that follows the record (struct probe_stack_record), or why it is
	 * missing (-errno of the capture; -ENOENT: not kept). 0: no stack.
	 */
	s32 stack_frames;
	/*
	 * A Go function's: the bytes of its goroutine's labels that follow
	 * the record and its entry stack (if stack_frames is not 0), packed as
	 * golabelset.h packs them; 0: none.
	 */
	u32 labels_size;
	/*
	 * Non-zero: the scope's USDT arguments (struct probe_args) follow the
	 * record and its entry stack (if stack_frames is not 0).
	 */
	u32 args;
};

/* A record of a probe with entry stacks: the user stack at its scope's entry, leaf first. */
struct probe_stack_record {
	struct probe_record rec;
	u64 frames[MAX_STACK_DEPTH];
};

/* Records with USDT arguments, without and with an entry stack. */
struct probe_args_record {
	struct probe_record rec;
	struct probe_args args;
};

struct probe_stack_args_record {
	struct probe_stack_record srec;
	struct probe_args args;
};

/* Frames an entry stack keeps: one slot of ips is left for the caller (see capture_entry_stack). */
#define ENTRY_STACK_DEPTH (MAX_STACK_DEPTH - 1)

/* The user stack of an open scope, captured at its entry. */
struct entry_stack {
	s32 frames; /* frames from ips[first], at most ENTRY_STACK_DEPTH; or -errno */
	u32 first;  /* 0 or 1 */
	u64 ips[MAX_STACK_DEPTH];
};

/* Per-CPU counters; user space sums them. */
struct probe_stats {
	u64 records;
	u64 exec_dropped;     /* execs ringbuf full */
	u64 labels_truncated; /* Go records whose goroutine's labels were cut (golabelset.h bounds) */
	u64 labels_lost;      /* Go records whose goroutine's labels could not be read */
};

/* Per-probe, per-CPU counts of scopes not sent to user space. */
struct probe_drops {
	u64 rate_limited; /* over the probe's rate limit */
	u64 ringbuf_full; /* records ringbuf full */
	u64 abandoned;	  /* a goroutine's scope left without a return */
};

/* A thread's scope: tid and goroutine 0; a goroutine's: its tgid and g. */
struct scope_key {
	u32 tid;
	u32 probe_index;
	u64 goroutine;
};

struct scope_state {
	u64 start_ns;
	u32 depth;
	u32 pad;
	u64 stack_depth; /* a goroutine's: its stack's top less sp at the outermost entry */
};

/*
 * A Go executable whose probes' records carry their goroutine's labels:
 * where g.labels is and what it points to (enum go_labels_layout), at
 * index (its Go uprobes' attach cookie >> 32) - 1.
 */
struct go_probe_file {
	u32 g_labels;
	u32 layout;
};

#define MAX_GO_PROBE_FILES 1024

/* A record with labels, built before it is output (per CPU). */
struct labels_scratch {
	struct probe_stack_record srec;
	/* a record's labels follow srec.rec, or srec with an entry stack (raw): room for either */
	u8 raw[GO_RAW_MASK + 1 + 256];
	struct go_label labels[GO_LABELS_MAX];
	struct go_map_bucket bucket;
	u64 offset; /* go_pack_labels' */
};

/* Keeps the ringbuf record types in BTF for bpf2go -type. */
const struct probe_record *unused_probe_record __attribute__((unused));
const struct probe_stack_record *unused_probe_stack_record __attribute__((unused));
const struct probe_args_record *unused_probe_args_record __attribute__((unused));
const struct probe_stack_args_record *unused_probe_stack_args_record __attribute__((unused));
const struct usdt_args_spec *unused_usdt_args_spec __attribute__((unused));

/* Number of probes in use (entries of probe_configs); set at load time. */
const volatile u32 nr_probes = 0;
/* Non-zero when a probe keeps entry stacks; set at load time. */
const volatile u32 entry_stacks_used = 0;
/* Non-zero when a probe's records carry USDT arguments; set at load time. */
const volatile u32 args_used = 0;

/*
 * Non-zero when the collector runs in a child pid namespace: the nsfs device
 * and inode of that namespace, set at load time. Records and exec events then
 * carry ids as seen from it (current_ids), and threads outside it are not
 * reported. Scope state stays keyed by host thread id, which thread exit and
 * exec know without translation.
 */
const volatile u64 pidns_dev = 0;
const volatile u64 pidns_ino = 0;

/* The current thread's ids as the collector sees them; non-zero outside its pid namespace. */
static __always_inline int collector_ids(u32 *tgid, u32 *tid)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };

	return current_ids(&ns, tgid, tid);
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, struct probe_config);
} probe_configs SEC(".maps");

/* LRU: should cleanup ever be missed, old entries make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREAD_SCOPES);
	__type(key, struct scope_key);
	__type(value, struct scope_state);
} scopes SEC(".maps");

/* Entry stacks of open scopes; LRU for the same reason as scopes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_ENTRY_STACKS);
	__type(key, struct scope_key);
	__type(value, struct entry_stack);
} entry_stacks SEC(".maps");

/* Threads inside a scope of a probe with arguments at once; user space sizes it (1 when unused). */
#define MAX_SCOPE_ARGS 4096

/* The USDT arguments of open scopes; LRU for the same reason as scopes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SCOPE_ARGS);
	__type(key, struct scope_key);
	__type(value, struct scope_args);
} scope_args SEC(".maps");

/* Per-CPU capture buffer of an entry stack (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct entry_stack);
} entry_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RECORDS_BYTES);
} records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_GO_PROBE_FILES);
	__type(key, u32);
	__type(value, struct go_probe_file);
} go_probe_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct labels_scratch);
} labels_scratch SEC(".maps");

/* Tgids (as the collector sees them) of processes that just exec'ed (u32 each). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} execs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct probe_stats);
} stats SEC(".maps");

/* Indexed by probe index. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, struct probe_drops);
} drops SEC(".maps");

/*
 * Per-probe theoretical arrival time of the next record (ktime ns) of the
 * rate limit; shared by every CPU so the limit holds per probe, not per CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, u64);
} rate_tat SEC(".maps");

/*
 * The probe's rate limit, as a generic cell rate algorithm (a token bucket
 * in one word): a record is allowed when it is at most rate_burst_ns ahead
 * of schedule, and then moves the schedule by rate_interval_ns. Two CPUs
 * racing on the word may both pass (one update is lost): the limit is
 * exceeded by at most one record per racing CPU, which needs no atomics
 * beyond what every supported kernel has.
 */
static __always_inline int rate_allows(const struct probe_config *cfg, u32 index, u64 now)
{
	u64 *tat, next;

	if (!cfg->rate_interval_ns)
		return 1;
	tat = bpf_map_lookup_elem(&rate_tat, &index);
	if (!tat)
		return 1;
	next = *tat > now ? *tat : now;
	if (next - now > cfg->rate_burst_ns)
		return 0;
	*tat = next + cfg->rate_interval_ns;
	return 1;
}

/* Keeps the user stack of the scope key opens (entry_stacks). */
static __always_inline void capture_entry_stack(struct pt_regs *ctx, struct scope_key *key)
{
	u64 ret = entry_return_address((const u64 *)ctx);
	struct entry_stack *es;
	u32 zero = 0, k;
	int n; /* int on every kernel: see common.h */

	es = bpf_map_lookup_elem(&entry_scratch, &zero);
	if (!es)
		return;
	/* From ips[1]: room for the caller below. */
	n = bpf_get_stack(ctx, &es->ips[1], ENTRY_STACK_DEPTH * sizeof(u64), BPF_F_USER_STACK);
	es->first = 1;
	es->frames = n ? n : -EFAULT;
	if (n > 0) {
		k = (u32)n / sizeof(u64);
		es->frames = k;
		/*
		 * At a function's first instruction its return address is not yet
		 * in the frame pointer chain, so the walk from the frame pointer
		 * skips the caller: add it. Newer kernels add it to a uprobe's
		 * stack themselves (5.10 does not); then it is there already and
		 * not added twice.
		 */
		if (ret && (k < 2 || es->ips[2] != ret)) {
			es->ips[0] = es->ips[1];
			es->ips[1] = ret;
			es->first = 0;
			es->frames = k < ENTRY_STACK_DEPTH ? k + 1 : ENTRY_STACK_DEPTH;
		}
	}
	bpf_map_update_elem(&entry_stacks, key, es, BPF_ANY);
}

/*
 * The outermost scope of key opens at start; args is the usdt_specs index
 * + 1 of the arguments to fetch (0: none).
 */
static __always_inline void scope_opens(struct pt_regs *ctx, const struct probe_config *cfg, struct scope_key *key,
					u64 start, u32 args)
{
	if (cfg->link_samples) {
		struct open_scope open = { .start_ns = start, .probe = key->probe_index + 1 };
		struct goroutine_ref ref = { .tgid = key->tid, .g = key->goroutine };
		void *map = key->goroutine ? (void *)&go_open_scopes : (void *)&open_scopes;
		void *k = key->goroutine ? (void *)&ref : (void *)&key->tid;
		struct open_scope *old = bpf_map_lookup_elem(map, k);

		/*
		 * An open scope of another probe stays: samples go to the
		 * outermost one. One of this probe is stale (its exit was
		 * missed, e.g. a longjmp past a uretprobe, or a panic past a
		 * Go function's returns): replaced.
		 */
		if (!old || old->probe == open.probe)
			bpf_map_update_elem(map, k, &open, BPF_ANY);
	}
	if (cfg->entry_stack)
		capture_entry_stack(ctx, key);
	if (args && cfg->args) {
		struct scope_args *sa = usdt_fetch_args(ctx, args - 1, start);

		if (sa)
			bpf_map_update_elem(&scope_args, key, sa, BPF_ANY);
	}
}

/*
 * A call enters key's scope: the outermost one opens. stack_depth is the
 * goroutine's (0 for a thread's): a goroutine's open scope not shallower
 * than the entry was left without a return, and starts again. args: see
 * scope_opens.
 */
static __always_inline int scope_enters(struct pt_regs *ctx, struct scope_key *key, u64 stack_depth, u32 args)
{
	u32 index = key->probe_index;
	struct probe_config *cfg;
	struct probe_drops *drop;
	struct scope_state *st;
	u64 now;

	cfg = bpf_map_lookup_elem(&probe_configs, &index);
	if (!cfg)
		return 0;
	st = bpf_map_lookup_elem(&scopes, key);
	if (!st) {
		struct scope_state init = { .start_ns = bpf_ktime_get_ns(), .depth = 1, .stack_depth = stack_depth };

		bpf_map_update_elem(&scopes, key, &init, BPF_ANY);
		scope_opens(ctx, cfg, key, init.start_ns, args);
		return 0;
	}
	if (key->goroutine && st->depth && stack_depth <= st->stack_depth) {
		st->depth = 0;
		drop = bpf_map_lookup_elem(&drops, &index);
		if (drop)
			drop->abandoned++;
	}
	if (st->depth++ == 0) {
		now = bpf_ktime_get_ns();
		st->start_ns = now;
		st->stack_depth = stack_depth;
		scope_opens(ctx, cfg, key, now, args);
	}
	return 0;
}

/* The cookie: the probe index (bits 0-15), a USDT site's usdt_specs index + 1 (bits 16-31; 0: no arguments). */
SEC("uprobe")
int probe_entry(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	u32 index = (u32)cookie & 0xffff;
	u64 id = bpf_get_current_pid_tgid();
	struct scope_key key = { .tid = (u32)id, .probe_index = index };
	struct probe_config *cfg;

	cfg = bpf_map_lookup_elem(&probe_configs, &index);
	if (!cfg)
		return 0;
	/* main_thread_only: worker threads keep no state at all. */
	if (cfg->main_thread_only && (u32)id != (u32)(id >> 32))
		return 0;
	return scope_enters(ctx, &key, 0, ((u32)cookie >> 16) & 0xffff);
}

/*
 * The scope key of the goroutine a Go function runs on (its g, from the
 * register Go code keeps it in) and how deep in its stack the function is:
 * the stack's top (g.stack.hi, g's second word in every Go release) less
 * sp, which runtime.copystack keeps when it moves the stack. 0: no g.
 */
static __always_inline u64 goroutine_scope(struct pt_regs *ctx, struct scope_key *key)
{
	const u64 *regs = (const u64 *)ctx;
	u64 g = regs[UREGS_GO_G / 8], sp = regs[UREGS_SP / 8], hi = 0;

	if (!g || bpf_probe_read_user(&hi, sizeof(hi), (const void *)(g + 8)) || hi < sp)
		return 0;
	key->tid = (u32)(bpf_get_current_pid_tgid() >> 32);
	key->goroutine = g;
	return hi - sp ? hi - sp : 1;
}

SEC("uprobe")
int probe_go_entry(struct pt_regs *ctx)
{
	struct scope_key key = { .probe_index = (u32)bpf_get_attach_cookie(ctx) };
	u64 depth = goroutine_scope(ctx, &key);

	if (!depth)
		return 0;
	return scope_enters(ctx, &key, depth, 0);
}

/*
 * The outermost scope of key, opened at start, ends: it is no longer open
 * to samples.
 */
static __always_inline void scope_closes(const struct probe_config *cfg, struct scope_key *key, u64 start)
{
	struct goroutine_ref ref = { .tgid = key->tid, .g = key->goroutine };
	void *map = key->goroutine ? (void *)&go_open_scopes : (void *)&open_scopes;
	void *k = key->goroutine ? (void *)&ref : (void *)&key->tid;
	struct open_scope *open;

	if (!cfg->link_samples)
		return;
	open = bpf_map_lookup_elem(map, k);
	if (open && open->probe == key->probe_index + 1 && open->start_ns == start)
		bpf_map_delete_elem(map, k);
}

/* Fills srec's entry stack: that of key's scope, or why there is none. */
static __always_inline void copy_entry_stack(struct probe_stack_record *srec, struct scope_key *key)
{
	struct entry_stack *es;

	srec->rec.stack_frames = -ENOENT;
	srec->frames[ENTRY_STACK_DEPTH] = 0;
	es = bpf_map_lookup_elem(&entry_stacks, key);
	if (es) {
		srec->rec.stack_frames = es->frames;
		if (bpf_probe_read_kernel(srec->frames, ENTRY_STACK_DEPTH * sizeof(u64), &es->ips[es->first & 1]))
			srec->rec.stack_frames = -EFAULT;
	} else {
		__builtin_memset(srec->frames, 0, sizeof(srec->frames));
	}
}

/* Fills the fields of a record of the scope started at start that every record has. */
static __always_inline void fill_record(struct probe_record *rec, u64 start, u64 now, u32 pid, u32 tid, u32 index)
{
	rec->start_ns = start;
	rec->end_ns = now;
	rec->pid = pid;
	rec->tid = tid;
	rec->probe_index = index;
	rec->args = 0;
	bpf_get_current_comm(rec->comm, sizeof(rec->comm));
}

/*
 * Waking the reader for every record costs the traced thread more than
 * the probe itself (a cross-CPU wakeup, expensive in a VM): wake it only
 * when the buffer fills up; user space also polls it every few tens of
 * milliseconds.
 */
static __always_inline u64 wakeup_flags(void)
{
	return bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= RECORDS_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
										      : BPF_RB_NO_WAKEUP;
}

/*
 * Sends a record of key's scope with its arguments args (an entry of
 * scope_args) and its entry stack if cfg keeps them; -1: the ring buffer
 * is full.
 */
static __always_inline int send_args_record(const struct probe_config *cfg, struct scope_key *key, u64 start, u64 now,
					    u32 pid, u32 tid, u32 index, const struct probe_args *args)
{
	struct probe_stack_args_record *sarec;
	struct probe_args_record *arec;

	if (!cfg->entry_stack) {
		arec = bpf_ringbuf_reserve(&records, sizeof(*arec), 0);
		if (!arec)
			return -1;
		fill_record(&arec->rec, start, now, pid, tid, index);
		arec->rec.stack_frames = 0;
		arec->rec.labels_size = 0;
		arec->rec.args = 1;
		if (bpf_probe_read_kernel(&arec->args, sizeof(arec->args), args))
			__builtin_memset(&arec->args, 0, sizeof(arec->args));
		bpf_ringbuf_submit(arec, wakeup_flags());
		return 0;
	}
	sarec = bpf_ringbuf_reserve(&records, sizeof(*sarec), 0);
	if (!sarec)
		return -1;
	fill_record(&sarec->srec.rec, start, now, pid, tid, index);
	sarec->srec.rec.labels_size = 0;
	sarec->srec.rec.args = 1;
	copy_entry_stack(&sarec->srec, key);
	if (bpf_probe_read_kernel(&sarec->args, sizeof(sarec->args), args))
		__builtin_memset(&sarec->args, 0, sizeof(sarec->args));
	bpf_ringbuf_submit(sarec, wakeup_flags());
	return 0;
}

/*
 * Sends a record of key's scope, with its entry stack if cfg keeps them,
 * and its USDT arguments if cfg's records carry them and they were
 * fetched when the scope opened at start; -1: the ring buffer is full.
 * Each reservation is filled and submitted where it is checked: 5.10's
 * verifier does not know a reference checked before is not NULL when it
 * is tested again.
 */
static __always_inline int send_record(const struct probe_config *cfg, struct scope_key *key, u64 start, u64 now,
				       u32 pid, u32 tid, u32 index)
{
	struct probe_stack_record *srec;
	struct probe_record *rec;
	struct scope_args *sa;

	if (cfg->args && !key->goroutine) {
		sa = bpf_map_lookup_elem(&scope_args, key);
		if (sa && sa->start_ns == start)
			return send_args_record(cfg, key, start, now, pid, tid, index, &sa->args);
	}
	if (!cfg->entry_stack) {
		rec = bpf_ringbuf_reserve(&records, sizeof(*rec), 0);
		if (!rec)
			return -1;
		fill_record(rec, start, now, pid, tid, index);
		rec->stack_frames = 0;
		rec->labels_size = 0;
		bpf_ringbuf_submit(rec, wakeup_flags());
		return 0;
	}
	srec = bpf_ringbuf_reserve(&records, sizeof(*srec), 0);
	if (!srec)
		return -1;
	fill_record(&srec->rec, start, now, pid, tid, index);
	srec->rec.labels_size = 0;
	copy_entry_stack(srec, key);
	bpf_ringbuf_submit(srec, wakeup_flags());
	return 0;
}

/*
 * Builds in this CPU's labels_scratch a record of goroutine key's scope
 * with the goroutine's labels (gf says where they are), after its entry
 * stack if cfg keeps them; returns its size, 0 when the goroutine has no
 * labels or they cannot be read (its record goes without; counted in st).
 */
static __always_inline u32 labelled_record(const struct probe_config *cfg, struct scope_key *key,
					   const struct go_probe_file *gf, struct labels_scratch *sc,
					   struct probe_stats *st)
{
	struct go_labels_proc p = {}; /* no read-only segment known: every string is copied */
	u32 n, truncated = 0, lost = 0;
	u64 set = 0;
	u8 *raw;
	int err;

	if (bpf_probe_read_user(&set, sizeof(set), (void *)(key->goroutine + gf->g_labels))) {
		st->labels_lost++;
		return 0;
	}
	if (!set)
		return 0;
	if (gf->layout == GO_LABELS_SLICE)
		err = go_slice_labels(set, sc->labels, &truncated);
	else
		err = go_map_labels(set, sc->labels, &sc->bucket, &truncated);
	if (err) {
		st->labels_lost++;
		return 0;
	}
	raw = cfg->entry_stack ? sc->raw : (u8 *)sc->srec.frames;
	n = go_pack_labels(&p, sc->labels, raw, &sc->offset, &truncated, &lost);
	st->labels_truncated += truncated;
	st->labels_lost += lost;
	if (!n || n > GO_LABELS_BYTES_MAX)
		return 0;
	sc->srec.rec.labels_size = n;
	if (!cfg->entry_stack) {
		sc->srec.rec.stack_frames = 0;
		return sizeof(sc->srec.rec) + n;
	}
	copy_entry_stack(&sc->srec, key);
	return sizeof(sc->srec) + n;
}

/*
 * A call leaves key's scope: the outermost one ends and is recorded, with
 * its goroutine's labels where gf says they are (NULL: none).
 */
static __always_inline int scope_leaves(struct scope_key *key, const struct go_probe_file *gf)
{
	u32 index = key->probe_index;
	struct labels_scratch *sc = NULL;
	struct probe_config *cfg;
	struct probe_drops *drop;
	struct probe_stats *cnt;
	struct scope_state *st;
	u32 zero = 0, pid, tid, size = 0;
	u64 now;

	st = bpf_map_lookup_elem(&scopes, key);
	if (!st || st->depth == 0) /* exit without entry: attached mid-scope */
		return 0;
	if (--st->depth)
		return 0;
	now = bpf_ktime_get_ns();
	cfg = bpf_map_lookup_elem(&probe_configs, &index);
	cnt = bpf_map_lookup_elem(&stats, &zero);
	drop = bpf_map_lookup_elem(&drops, &index);
	if (!cfg || !cnt || !drop)
		return 0;
	scope_closes(cfg, key, st->start_ns);
	if (now - st->start_ns < cfg->min_duration_ns)
		return 0;
	if (collector_ids(&pid, &tid)) /* a process the collector cannot see */
		return 0;
	/* Before the reserve: a hot probe costs the reader nothing beyond its limit. */
	if (!rate_allows(cfg, index, now)) {
		drop->rate_limited++;
		return 0;
	}
	if (gf && key->goroutine) {
		sc = bpf_map_lookup_elem(&labels_scratch, &zero);
		if (sc)
			size = labelled_record(cfg, key, gf, sc, cnt);
		barrier_var(size); /* the bound below on the register the call takes, for 5.10 */
		if (size > sizeof(*sc))
			size = 0;
	}
	if (sc && size) {
		fill_record(&sc->srec.rec, st->start_ns, now, pid, tid, index);
		if (bpf_ringbuf_output(&records, sc, size, wakeup_flags())) {
			drop->ringbuf_full++;
			return 0;
		}
		cnt->records++;
		return 0;
	}
	if (send_record(cfg, key, st->start_ns, now, pid, tid, index)) {
		drop->ringbuf_full++;
		return 0;
	}
	cnt->records++;
	return 0;
}

SEC("uprobe")
int probe_exit(struct pt_regs *ctx)
{
	struct scope_key key = { .tid = (u32)bpf_get_current_pid_tgid(),
				 .probe_index = (u32)bpf_get_attach_cookie(ctx) };

	return scope_leaves(&key, NULL);
}

/* The cookie of a Go function's uprobes: the probe index, and its file's go_probe_files index + 1 above (0: none). */
SEC("uprobe")
int probe_go_exit(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	struct scope_key key = { .probe_index = (u32)cookie };
	const struct go_probe_file *gf = NULL;
	u32 file = cookie >> 32;

	if (!goroutine_scope(ctx, &key))
		return 0;
	if (file) {
		file--;
		gf = bpf_map_lookup_elem(&go_probe_files, &file);
		if (gf && gf->layout != GO_LABELS_MAP && gf->layout != GO_LABELS_SLICE)
			gf = NULL;
	}
	return scope_leaves(&key, gf);
}

static __always_inline void forget_thread(u32 tid)
{
	struct scope_key key = { .tid = tid };

	bpf_map_delete_elem(&open_scopes, &tid);
	for (u32 i = 0; i < MAX_PROBES; i++) {
		if (i >= nr_probes)
			break;
		key.probe_index = i;
		bpf_map_delete_elem(&scopes, &key);
		if (entry_stacks_used)
			bpf_map_delete_elem(&entry_stacks, &key);
		if (args_used)
			bpf_map_delete_elem(&scope_args, &key);
	}
}

/* Every exiting thread: drop its scope state. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(probe_thread_exit, struct task_struct *p)
{
	forget_thread(BPF_CORE_READ(p, pid));
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(probe_exec, struct task_struct *p, int old_pid)
{
	struct probe_stats *cnt;
	u32 zero = 0, tgid, tid;
	u32 *pid;

	/* The new image starts with no open scopes. */
	forget_thread(BPF_CORE_READ(p, pid));
	if ((u32)old_pid != (u32)BPF_CORE_READ(p, pid))
		forget_thread(old_pid);

	/* p is current: its tgid as the collector sees it, if it can. */
	if (collector_ids(&tgid, &tid))
		return 0;
	pid = bpf_ringbuf_reserve(&execs, sizeof(*pid), 0);
	if (!pid) {
		cnt = bpf_map_lookup_elem(&stats, &zero);
		if (cnt)
			cnt->exec_dropped++;
		return 0;
	}
	*pid = tgid;
	bpf_ringbuf_submit(pid, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
