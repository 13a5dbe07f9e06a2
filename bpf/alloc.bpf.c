//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Allocation profiles of Go processes. The Go runtime samples about one
 * allocation per runtime.MemProfileRate bytes and calls its profiling hooks
 * for those only; uprobes on them (after each function's stack check,
 * internal/gosites) see:
 *
 *   runtime.mProf_Malloc(p, size)       go1.21-1.22  (go_malloc_p0)
 *   runtime.mProf_Malloc(mp, p, size)   go1.23+      (go_malloc_p1)
 *       the sampled object, its size, the goroutine's user stack (frame
 *       pointers) and pprof labels;
 *   runtime.freeSpecial(s, p, size)     the sweeper frees a special record
 *       of object p (a profiled object's, a finalizer's, ...): p is kept
 *       for its goroutine;
 *   runtime.mProf_Free(b, ...)          the record was a profiled
 *       object's: p, kept by freeSpecial, is freed;
 *   runtime.gcMarkTermination           a garbage collection cycle ends its
 *       marking: what was allocated before it and is not swept is live.
 *
 * Mallocs, frees and cycles are events in alloc_events; user space
 * (internal/allocs) keeps the live sampled objects by address.
 */
#include "common.h"
#include "arch.h"
#include "golabelset.h"

#define ALLOC_EVENTS_BYTES (1024 * 1024)
/* Wake the reader once a quarter of the buffer is in use. */
#define ALLOC_WAKEUP_BYTES (ALLOC_EVENTS_BYTES / 4)
#define MAX_ALLOC_PROCS 16384
/* Goroutines between freeSpecial and mProf_Free at once (sweepers: about one per P). */
#define MAX_FREEING 4096

enum alloc_event_kind {
	ALLOC_GO_MALLOC = 1, /* addr, size, stack, labels */
	ALLOC_GO_FREE = 3,   /* addr, bucket */
	ALLOC_GO_CYCLE = 4,  /* a garbage collection ends its marking */
};

/* One event; a malloc's has ips and, after them, labels_size bytes of labels (golabelset.h). */
struct alloc_event {
	u32 kind;
	u32 pid; /* tgid as the collector sees it */
	u32 tid;
	s32 frames; /* ips kept; or -errno of the stack's capture */
	u64 addr;   /* the object */
	u64 size;   /* its size */
	u64 bucket; /* its runtime bucket */
	u64 rate;   /* a malloc's: the process's runtime.MemProfileRate (0: unknown) */
	u32 labels_size;
	u32 pad;
	char comm[TASK_COMM_LEN];
	u64 ips[MAX_STACK_DEPTH]; /* leaf first */
};

/* Where a Go process's goroutine labels are; written by user space, keyed by pid as the collector sees it. */
struct alloc_go_proc {
	u32 g_labels;  /* offset of runtime.g.labels */
	u32 layout;    /* enum go_labels_layout */
	u64 rate_addr; /* where its runtime.MemProfileRate is (0: unknown) */
};

struct alloc_scratch {
	struct alloc_event ev;
	u8 raw[GO_RAW_MASK + 1 + 256]; /* labels, right after ev */
	struct go_label labels[GO_LABELS_MAX];
	struct go_map_bucket bucket;
	u64 offset; /* go_pack_labels' */
};

/* Per-CPU counters; user space sums them. */
struct alloc_stats {
	u64 events;
	u64 ringbuf_full;
	u64 stack_lost; /* mallocs whose stack could not be captured */
	u64 labels_lost;
	u64 labels_truncated;
};

const struct alloc_event *unused_alloc_event __attribute__((unused));

/* See probe.bpf.c: ids as seen from the collector's pid namespace when set. */
const volatile u64 pidns_dev = 0;
const volatile u64 pidns_ino = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ALLOC_EVENTS_BYTES);
} alloc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ALLOC_PROCS);
	__type(key, u32);
	__type(value, struct alloc_go_proc);
} alloc_go_procs SEC(".maps");

/* The object whose special record a goroutine (its g) frees (freeSpecial's p). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FREEING);
	__type(key, u64);
	__type(value, u64);
} freeing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct alloc_scratch);
} alloc_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct alloc_stats);
} alloc_counts SEC(".maps");

static __always_inline u64 alloc_wakeup(void)
{
	return bpf_ringbuf_query(&alloc_events, BPF_RB_AVAIL_DATA) >= ALLOC_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
											 : BPF_RB_NO_WAKEUP;
}

static __always_inline u64 go_arg(const struct pt_regs *ctx, u32 off)
{
	return *(const u64 *)((const u8 *)ctx + off);
}

/* A small event (no stack): bucket or free. */
static __always_inline int send_small(u32 kind, u64 addr, u64 bucket)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };
	struct alloc_stats *st;
	struct alloc_event *ev;
	u32 zero = 0, pid, tid;

	st = bpf_map_lookup_elem(&alloc_counts, &zero);
	if (!st || current_ids(&ns, &pid, &tid))
		return 0;
	ev = bpf_ringbuf_reserve(&alloc_events, offsetof(struct alloc_event, ips), 0);
	if (!ev) {
		st->ringbuf_full++;
		return 0;
	}
	__builtin_memset(ev, 0, offsetof(struct alloc_event, ips));
	ev->kind = kind;
	ev->pid = pid;
	ev->tid = tid;
	ev->addr = addr;
	ev->bucket = bucket;
	bpf_ringbuf_submit(ev, alloc_wakeup());
	st->events++;
	return 0;
}

/* The labels of the goroutine in g, packed after sc->ev; returns their size (0: none). */
static __always_inline u32 malloc_labels(const struct alloc_go_proc *gp, u64 g, struct alloc_scratch *sc,
					 struct alloc_stats *st)
{
	struct go_labels_proc p = {}; /* no read-only segment known: every string is copied */
	u32 n, truncated = 0, lost = 0;
	u64 set = 0;
	int err;

	if (!g || bpf_probe_read_user(&set, sizeof(set), (void *)(g + gp->g_labels))) {
		st->labels_lost++;
		return 0;
	}
	if (!set)
		return 0;
	if (gp->layout == GO_LABELS_SLICE)
		err = go_slice_labels(set, sc->labels, &truncated);
	else
		err = go_map_labels(set, sc->labels, &sc->bucket, &truncated);
	if (err) {
		st->labels_lost++;
		return 0;
	}
	n = go_pack_labels(&p, sc->labels, sc->raw, &sc->offset, &truncated, &lost);
	st->labels_truncated += truncated;
	st->labels_lost += lost;
	if (n > GO_LABELS_BYTES_MAX)
		return 0;
	return n;
}

static __always_inline int go_malloc(struct pt_regs *ctx, u64 addr, u64 size)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };
	const struct alloc_go_proc *gp;
	struct alloc_scratch *sc;
	struct alloc_stats *st;
	u32 zero = 0, pid, tid, n = 0;
	long frames;

	st = bpf_map_lookup_elem(&alloc_counts, &zero);
	sc = bpf_map_lookup_elem(&alloc_scratch, &zero);
	if (!st || !sc || current_ids(&ns, &pid, &tid))
		return 0;
	sc->ev.kind = ALLOC_GO_MALLOC;
	sc->ev.pid = pid;
	sc->ev.tid = tid;
	sc->ev.addr = addr;
	sc->ev.size = size;
	sc->ev.bucket = 0;
	sc->ev.rate = 0;
	sc->ev.pad = 0;
	bpf_get_current_comm(sc->ev.comm, sizeof(sc->ev.comm));
	frames = bpf_get_stack(ctx, sc->ev.ips, sizeof(sc->ev.ips), BPF_F_USER_STACK);
	if (frames > 0) {
		sc->ev.frames = frames / sizeof(u64);
	} else {
		sc->ev.frames = frames ? frames : -EFAULT;
		st->stack_lost++;
	}
	gp = bpf_map_lookup_elem(&alloc_go_procs, &pid);
	if (gp && gp->rate_addr)
		bpf_probe_read_user(&sc->ev.rate, sizeof(sc->ev.rate), (void *)gp->rate_addr);
	if (gp && (gp->layout == GO_LABELS_MAP || gp->layout == GO_LABELS_SLICE))
		n = malloc_labels(gp, go_arg(ctx, UREGS_GO_G), sc, st);
	barrier_var(n); /* the bound below on the register the call takes, for 5.10 */
	if (n > GO_LABELS_BYTES_MAX)
		n = 0;
	sc->ev.labels_size = n;
	if (bpf_ringbuf_output(&alloc_events, sc, sizeof(sc->ev) + n, alloc_wakeup())) {
		st->ringbuf_full++;
		return 0;
	}
	st->events++;
	return 0;
}

SEC("uprobe")
int go_malloc_p0(struct pt_regs *ctx)
{
	return go_malloc(ctx, go_arg(ctx, UREGS_GO_ARG0), go_arg(ctx, UREGS_GO_ARG1));
}

SEC("uprobe")
int go_malloc_p1(struct pt_regs *ctx)
{
	return go_malloc(ctx, go_arg(ctx, UREGS_GO_ARG1), go_arg(ctx, UREGS_GO_ARG2));
}

SEC("uprobe")
int go_free_special(struct pt_regs *ctx)
{
	u64 g = go_arg(ctx, UREGS_GO_G), p = go_arg(ctx, UREGS_GO_ARG1);

	bpf_map_update_elem(&freeing, &g, &p, BPF_ANY);
	return 0;
}

SEC("uprobe")
int go_free(struct pt_regs *ctx)
{
	u64 g = go_arg(ctx, UREGS_GO_G), *p, addr;

	p = bpf_map_lookup_elem(&freeing, &g);
	if (!p)
		return 0;
	addr = *p;
	bpf_map_delete_elem(&freeing, &g);
	return send_small(ALLOC_GO_FREE, addr, go_arg(ctx, UREGS_GO_ARG0));
}

SEC("uprobe")
int go_gc_cycle(struct pt_regs *ctx)
{
	return send_small(ALLOC_GO_CYCLE, 0, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
