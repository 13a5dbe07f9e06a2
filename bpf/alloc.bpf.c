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
 * Native allocators announce their allocations with the USDT probes
 * otel_memory:alloc(ptr, size, weighted_bytes) and otel_memory:free(ptr)
 * (usdt_alloc, usdt_free: uprobes at their sites, the attach cookie's bits
 * 16 to 31 the site's usdt_specs index + 1). Each thread samples about one
 * allocation per usdt_interval weighted bytes: a countdown, decremented by
 * each allocation's weighted_bytes, samples the allocation that takes it
 * to 0 or below and draws the next from an exponential distribution, so
 * an allocation of W bytes is sampled with probability
 * 1 - exp(-W / usdt_interval). Only a sampled object's free is sent.
 *
 * Mallocs, frees and cycles are events in alloc_events; user space
 * (internal/allocs) keeps the live sampled objects by address. So are
 * execs (tp_btf/sched_process_exec), after which user space looks at the
 * process's new executable and libraries.
 */
#include "common.h"
#include "arch.h"
#include "golabelset.h"
#define USDT_NO_SCOPE_ARGS
#include "usdtargs.h"

#define ALLOC_EVENTS_BYTES (1024 * 1024)
/* Wake the reader once a quarter of the buffer is in use. */
#define ALLOC_WAKEUP_BYTES (ALLOC_EVENTS_BYTES / 4)
#define MAX_ALLOC_PROCS 16384
/* Goroutines between freeSpecial and mProf_Free at once (sweepers: about one per P). */
#define MAX_FREEING 4096
/* Threads with a sampling countdown; live sampled objects of USDT allocators. */
#define MAX_USDT_THREADS 65536
#define MAX_USDT_LIVE (1 << 17)

enum alloc_event_kind {
	ALLOC_GO_MALLOC = 1,   /* addr, size, stack, labels */
	ALLOC_GO_FREE = 3,     /* addr, bucket */
	ALLOC_GO_CYCLE = 4,    /* a garbage collection ends its marking */
	ALLOC_USDT_MALLOC = 5, /* addr, size, weight, rate (usdt_interval), stack */
	ALLOC_USDT_FREE = 6,   /* addr */
	ALLOC_EXEC = 7,	       /* the process exec'ed: look at its new image */
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
	u64 rate;   /* a Go malloc's: runtime.MemProfileRate (0: unknown); a USDT one's: usdt_interval */
	u64 weight; /* a USDT malloc's weighted_bytes */
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
	u64 offset;		/* go_pack_labels' */
	struct probe_args args; /* a USDT probe's */
};

/* A live sampled object of a USDT allocator. */
struct usdt_object {
	u32 pid;
	u32 pad;
	u64 addr;
};

/* Per-CPU counters; user space sums them. */
struct alloc_stats {
	u64 events;
	u64 ringbuf_full;
	u64 stack_lost; /* mallocs whose stack could not be captured */
	u64 labels_lost;
	u64 labels_truncated;
	u64 usdt_args_lost; /* USDT probe firings whose arguments could not be read */
};

const struct alloc_event *unused_alloc_event __attribute__((unused));

/* See probe.bpf.c: ids as seen from the collector's pid namespace when set. */
const volatile u64 pidns_dev = 0;
const volatile u64 pidns_ino = 0;
/* The mean weighted bytes between sampled USDT allocations of a thread. */
const volatile u64 usdt_interval = 512 * 1024;

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

/* Each thread's weighted bytes to go until its next sampled USDT allocation, by (host) tid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_USDT_THREADS);
	__type(key, u32);
	__type(value, s64);
} usdt_countdown SEC(".maps");

/* The sampled USDT allocations not freed yet; LRU: a lost free's object ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_USDT_LIVE);
	__type(key, struct usdt_object);
	__type(value, u8);
} usdt_live SEC(".maps");

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

/* A small event (no stack): a free, a cycle, an exec (woken at once: its process is to be looked at). */
static __always_inline int send_small(u32 kind, u64 addr, u64 bucket, u64 wakeup)
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
	bpf_ringbuf_submit(ev, wakeup);
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

/*
 * The user stack of a Go function at its probe (after its stack check,
 * before its prologue saves the frame pointer), leaf first, into ips:
 * the pc, its return address (on top of the stack on x86-64, in the link
 * register on arm64), then the callers' return addresses along the frame
 * pointer chain Go keeps on both ({caller's frame pointer, return
 * address} at each frame pointer). Returns the frames kept. Walked here,
 * not with bpf_get_stack: on arm64 Linux 5.10 that stops at the pc in a
 * uprobe.
 */
static __always_inline s32 go_entry_stack(const u64 *regs, u64 *ips)
{
	u64 fp = regs[UREGS_BP / 8], rec[2];
	s32 n = 2;

	ips[0] = regs[UREGS_IP / 8];
	ips[1] = entry_return_address(regs);
	if (!ips[1])
		return 1;
	for (int i = 2; i < MAX_STACK_DEPTH; i++) {
		if (!fp || (fp & 7) || bpf_probe_read_user(rec, sizeof(rec), (void *)fp) || !rec[1])
			break;
		ips[i] = RETURN_ADDRESS(rec[1]);
		n = i + 1;
		if (rec[0] <= fp) /* the chain goes up the stack, or it is not one */
			break;
		fp = rec[0];
	}
	return n;
}

static __always_inline int go_malloc(struct pt_regs *ctx, u64 addr, u64 size)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };
	const struct alloc_go_proc *gp;
	struct alloc_scratch *sc;
	struct alloc_stats *st;
	u32 zero = 0, pid, tid, n = 0;

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
	sc->ev.weight = 0;
	sc->ev.pad = 0;
	bpf_get_current_comm(sc->ev.comm, sizeof(sc->ev.comm));
	sc->ev.frames = go_entry_stack((const u64 *)ctx, sc->ev.ips);
	if (sc->ev.frames < 2)
		st->stack_lost++;
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
	return send_small(ALLOC_GO_FREE, addr, go_arg(ctx, UREGS_GO_ARG0), alloc_wakeup());
}

SEC("uprobe")
int go_gc_cycle(struct pt_regs *ctx)
{
	return send_small(ALLOC_GO_CYCLE, 0, 0, alloc_wakeup());
}

/* ln 2 in 16.16 fixed point. */
#define LN2_Q16 45426
/* Weighted bytes above this count as this much (the countdown stays in range). */
#define USDT_WEIGHT_MAX (1ull << 40)

/* log2(x) for 1 <= x <= 2^32 in 16.16 fixed point, its fraction truncated; no branches (no states to verify). */
static __always_inline u64 log2_q16(u64 x)
{
	u64 n = 0, m, t, frac = 0;

	x = x > (1ull << 32) ? 1ull << 32 : x;
#pragma unroll
	for (u32 b = 32; b; b >>= 1) { /* n: the highest set bit */
		t = x >> (n + b);
		n += ((t | -t) >> 63) * b;
	}
	/* The mantissa x / 2^n in [1, 2) with 31 fraction bits; each squaring yields a bit of its log2. */
	m = n > 31 ? 1ull << 31 : x << (31 - n);
#pragma unroll
	for (int i = 15; i >= 0; i--) {
		m = (m * m) >> 31;
		t = m >> 32;
		m >>= t;
		frac |= t << i;
	}
	return n << 16 | frac;
}

/* An exponential draw of mean mean: mean * -ln(U), U uniform in (0, 1] (in steps of 2^-32). */
static __always_inline s64 usdt_draw(u64 mean)
{
	u64 u = (u64)bpf_get_prandom_u32() + 1;
	u64 neg_ln = (((32ull << 16) - log2_q16(u)) * LN2_Q16) >> 16; /* -ln(u / 2^32), 16.16 */

	return (s64)((mean * neg_ln) >> 16);
}

/* Fetches the first n arguments of the probe at this site (its cookie's usdt_specs index) into sc->args. */
static __always_inline int usdt_args(struct pt_regs *ctx, struct alloc_scratch *sc, u32 n)
{
	u32 spec = ((u32)bpf_get_attach_cookie(ctx) >> 16) & 0xffff;
	const struct usdt_args_spec *s;

	if (!spec)
		return -1;
	spec--;
	s = bpf_map_lookup_elem(&usdt_specs, &spec);
	if (!s)
		return -1;
#pragma unroll
	for (u32 i = 0; i < 3; i++) {
		if (i < n && usdt_fetch_arg(ctx, &s->args[i], &sc->args, i))
			return -1;
	}
	return 0;
}

/* Takes weight bytes off the calling thread's countdown; non-zero: the allocation is sampled. */
static __always_inline int usdt_sampled(u64 weight)
{
	u32 tid = (u32)bpf_get_current_pid_tgid(); /* the host's: unique */
	s64 *left, next;
	int sampled;

	if (weight > USDT_WEIGHT_MAX)
		weight = USDT_WEIGHT_MAX;
	left = bpf_map_lookup_elem(&usdt_countdown, &tid);
	if (left) {
		*left -= (s64)weight;
		if (*left > 0)
			return 0;
		*left = usdt_draw(usdt_interval);
		return 1;
	}
	/* A new thread: its first countdown is a draw too. */
	next = usdt_draw(usdt_interval) - (s64)weight;
	sampled = next <= 0;
	if (sampled)
		next = usdt_draw(usdt_interval);
	bpf_map_update_elem(&usdt_countdown, &tid, &next, BPF_ANY);
	return sampled;
}

/* otel_memory:alloc(ptr, size, weighted_bytes): a sampled allocation is kept live and sent with its stack. */
SEC("uprobe")
int usdt_alloc(struct pt_regs *ctx)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };
	struct usdt_object obj = {};
	struct alloc_scratch *sc;
	struct alloc_stats *st;
	u32 zero = 0, pid, tid;
	u64 weight;
	long frames;
	u8 one = 1;

	st = bpf_map_lookup_elem(&alloc_counts, &zero);
	sc = bpf_map_lookup_elem(&alloc_scratch, &zero);
	if (!st || !sc)
		return 0;
	if (usdt_args(ctx, sc, 3)) {
		st->usdt_args_lost++;
		return 0;
	}
	weight = sc->args.values[2];
	if (!sc->args.values[0] || !weight || !usdt_sampled(weight) || current_ids(&ns, &pid, &tid))
		return 0;
	obj.pid = pid;
	obj.addr = sc->args.values[0];
	/* Live before it is sent: a free on another thread right after finds it. */
	bpf_map_update_elem(&usdt_live, &obj, &one, BPF_ANY);
	sc->ev.kind = ALLOC_USDT_MALLOC;
	sc->ev.pid = pid;
	sc->ev.tid = tid;
	sc->ev.addr = obj.addr;
	sc->ev.size = sc->args.values[1];
	sc->ev.bucket = 0;
	sc->ev.rate = usdt_interval;
	sc->ev.weight = weight;
	sc->ev.labels_size = 0;
	sc->ev.pad = 0;
	bpf_get_current_comm(sc->ev.comm, sizeof(sc->ev.comm));
	frames = bpf_get_stack(ctx, sc->ev.ips, sizeof(sc->ev.ips), BPF_F_USER_STACK);
	if (frames > 0) {
		sc->ev.frames = frames / sizeof(u64);
	} else {
		sc->ev.frames = frames ? frames : -EFAULT;
		st->stack_lost++;
	}
	if (bpf_ringbuf_output(&alloc_events, &sc->ev, sizeof(sc->ev), alloc_wakeup())) {
		bpf_map_delete_elem(&usdt_live, &obj);
		st->ringbuf_full++;
		return 0;
	}
	st->events++;
	return 0;
}

/* otel_memory:free(ptr): sent only for a live sampled object. */
SEC("uprobe")
int usdt_free(struct pt_regs *ctx)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };
	struct usdt_object obj = {};
	struct alloc_scratch *sc;
	struct alloc_stats *st;
	u32 zero = 0, tid;

	st = bpf_map_lookup_elem(&alloc_counts, &zero);
	sc = bpf_map_lookup_elem(&alloc_scratch, &zero);
	if (!st || !sc)
		return 0;
	if (usdt_args(ctx, sc, 1)) {
		st->usdt_args_lost++;
		return 0;
	}
	obj.addr = sc->args.values[0];
	if (!obj.addr || current_ids(&ns, &obj.pid, &tid) || bpf_map_delete_elem(&usdt_live, &obj))
		return 0;
	return send_small(ALLOC_USDT_FREE, obj.addr, 0, alloc_wakeup());
}

SEC("tp_btf/sched_process_exec")
int alloc_exec(u64 *ctx)
{
	return send_small(ALLOC_EXEC, 0, 0, BPF_RB_FORCE_WAKEUP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
