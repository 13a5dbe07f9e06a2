/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The runtime/pprof labels of the goroutine a Go thread runs (pprof.Do,
 * SetGoroutineLabels): from the thread's g (the register Go code keeps it
 * in, r14 or x28, when the thread's stack is g's; else TLS) to g.m.curg,
 * the user goroutine even on the system or signal stack, to curg.labels.
 * User space fills context_procs[pid].go (threadctx.h) from the
 * executable's Go version (internal/golabels). The labels are copied as
 * klen, key, vlen, value bytes, a literal string by reference, for
 * threadctx.h to store.
 */
#ifndef BPFPROFILER_GOLABELS_H
#define BPFPROFILER_GOLABELS_H

#include "common.h"
#include "arch.h"
#include "unwind.h"

/* Labels kept per sample, and bytes per key and per value; longer ones are cut and counted. */
#define GO_LABELS_MAX 8
#define GO_LABEL_KEY_MAX 64
#define GO_LABEL_VALUE_MAX 128
#define GO_MAP_BUCKET_SLOTS 8
/* The smallest tophash of a live map entry (smaller ones mark empty or moved slots). */
#define GO_MIN_TOP_HASH 5

enum go_labels_layout {
	GO_LABELS_NONE = 0,  /* no labels read: the goroutine only */
	GO_LABELS_MAP = 1,   /* Go 1.21-1.23: *labelMap is a map[string]string */
	GO_LABELS_SLICE = 2, /* Go 1.24+: *labelMap starts with a []struct{key, value string} */
};

/* Where a Go process's goroutine labels are (golabels.Offsets). */
struct go_labels_proc {
	s64 tls_offset; /* g from the thread pointer */
	u32 g_m;	/* runtime.g.m */
	u32 g_labels;	/* runtime.g.labels */
	u32 g_goid;	/* runtime.g.goid */
	u32 m_g0;	/* runtime.m.g0 */
	u32 m_gsignal;	/* runtime.m.gsignal */
	u32 m_curg;	/* runtime.m.curg */
	u8 layout;	/* enum go_labels_layout */
	u8 g_register;	/* 1: g is in x28 only (arm64 without cgo), not in TLS */
	u16 reserved;
	u32 reserved2;
	/*
	 * The executable's read-only segment, where its string literals are
	 * (0, 0: unknown): a label's string there is stored by reference.
	 */
	u64 strings_lo, strings_hi;
};

/* A Go string header pair: one label. */
struct go_label {
	u64 key, key_len, value, value_len;
};

/* A Go 1.21-1.23 hmap bucket of map[string]string. */
struct go_map_bucket {
	u8 tophash[GO_MAP_BUCKET_SLOTS];
	u64 keys[GO_MAP_BUCKET_SLOTS][2];
	u64 values[GO_MAP_BUCKET_SLOTS][2];
	u64 overflow;
};

/* The start of a Go 1.21-1.23 hmap. */
struct go_hmap {
	u64 count;
	u8 flags;
	u8 log2_buckets;
	u16 noverflow;
	u32 hash0;
	u64 buckets;
	u64 oldbuckets;
};

/*
 * The g register Go code keeps (r14, x28) and the stack pointer: from
 * uregs, the user registers a sample in user mode has, else as the thread
 * saved them entering the kernel; 0 when they cannot be read (a kernel
 * before bpf_task_pt_regs, unless g is in x28 only).
 */
static __always_inline int go_register_g(const struct go_labels_proc *p, const u64 *uregs, u64 *g, u64 *sp)
{
	u64 base;

	if (uregs) {
		*g = uregs[UREGS_GO_G / 8];
		*sp = uregs[UREGS_SP / 8];
		return 1;
	}
	if (have_task_pt_regs) {
		const u64 *regs = (const u64 *)bpf_task_pt_regs(bpf_get_current_task_btf());

		*g = regs[UREGS_GO_G / 8]; /* loads, no helper */
		*sp = regs[UREGS_SP / 8];
		return 1;
	}
	if (!p->g_register)
		return 0;
	base = saved_user_regs_base((struct task_struct *)bpf_get_current_task());
	return base && !bpf_probe_read_kernel(g, sizeof(*g), (void *)(base + UREGS_GO_G)) &&
	       !bpf_probe_read_kernel(sp, sizeof(*sp), (void *)(base + UREGS_SP));
}

/* The thread's g in TLS (0: none). */
static __always_inline u64 go_tls_g(const struct go_labels_proc *p)
{
	u64 g = 0, tp = user_thread_pointer();

	if (!tp || bpf_probe_read_user(&g, sizeof(g), (void *)(tp + p->tls_offset)))
		return 0;
	return g;
}

/* go_user_goroutine's answer when g is not a goroutine it can read. */
#define GO_NO_GOROUTINE (~0ULL)
/* g's bytes from its start (g.stack) to past g.m, g.goid and g.labels, read at once (golabels.Offsets keeps them within). */
#define GO_G_BLOCK 512

/*
 * The goroutine whose labels count for a sample of g, a candidate from a
 * register (from_register) or TLS: m.curg (0: the thread runs none, it
 * schedules). g's start through g.labels is read at once into block;
 * *g_labels is g's labels, curg's when it is g.
 * A thread whose stack pointer sp is within g.stack runs g: a goroutine
 * with an id is the user one, else (g0, gsignal) m.curg. Otherwise a g
 * from a register may be anything (C code, the vDSO): GO_NO_GOROUTINE,
 * for the caller to take TLS, unless x28 is all there is; then, as for
 * TLS, g must be one of its m's goroutines (the user one, g0 or gsignal).
 */
static __always_inline u64 go_user_goroutine(const struct go_labels_proc *p, u64 g, u64 sp, int from_register,
					     u8 *block, u64 *g_labels)
{
	u32 span = (p->g_m > p->g_labels ? p->g_m : p->g_labels);
	u64 lo, hi, m, goid, curg = 0, other = 0;

	span = (span > p->g_goid ? span : p->g_goid) + 8;
	barrier_var(span); /* a mask on the helper's register, for 5.10 (see go_copy_string) */
	span &= GO_G_BLOCK - 1;
	if (!g || span < 16 || bpf_probe_read_user(block, span, (void *)g))
		return GO_NO_GOROUTINE;
	/* 8-aligned offsets within the block (no-op masks: user space checked them) */
	lo = *(u64 *)block;
	hi = *(u64 *)(block + 8);
	m = *(u64 *)(block + (p->g_m & (GO_G_BLOCK - 8)));
	*g_labels = *(u64 *)(block + (p->g_labels & (GO_G_BLOCK - 8)));
	goid = *(u64 *)(block + (p->g_goid & (GO_G_BLOCK - 8)));
	if (sp > lo && sp <= hi) {
		if (goid)
			return g;
		if (!m || bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + p->m_curg)))
			return GO_NO_GOROUTINE;
		return curg;
	}
	if (from_register && !p->g_register)
		return GO_NO_GOROUTINE;
	/*
	 * A g from TLS is the thread's; with a goroutine id it is no g0 or
	 * gsignal (those have none): the user goroutine, m.curg.
	 */
	if (goid && !from_register)
		return g;
	if (!m || bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + p->m_curg)))
		return GO_NO_GOROUTINE;
	if (curg == g)
		return curg;
	if (!bpf_probe_read_user(&other, sizeof(other), (void *)(m + p->m_g0)) && other == g)
		return curg;
	if (!bpf_probe_read_user(&other, sizeof(other), (void *)(m + p->m_gsignal)) && other == g)
		return curg;
	return GO_NO_GOROUTINE;
}

/* Marks a label slot the set does not fill (its key_len). */
#define GO_LABEL_ABSENT (~0ULL)

/* The string headers of a Go 1.24+ label set into labels (the rest absent); returns 0, -1: fault. */
static __always_inline int go_slice_labels(u64 set, struct go_label *labels, u32 *truncated)
{
	u64 list[2] = {}; /* data, len */
	u32 n;

#pragma unroll
	for (int i = 0; i < GO_LABELS_MAX; i++)
		labels[i].key_len = GO_LABEL_ABSENT;
	if (bpf_probe_read_user(list, sizeof(list), (void *)set))
		return -1;
	if (list[1] > GO_LABELS_MAX) {
		*truncated = 1;
		list[1] = GO_LABELS_MAX;
	}
	n = list[1];
	/*
	 * Bounded by a mask (no-op: n <= 8) the verifier sees on the register
	 * the call takes: 5.10's does not carry a bound a comparison learnt to
	 * the register's copies.
	 */
	barrier_var(n);
	n &= 15;
	if (n && bpf_probe_read_user(labels, n * sizeof(*labels), (void *)list[0]))
		return -1;
	return 0;
}

/*
 * The string headers of a Go 1.21-1.23 label map into labels, slot for
 * slot of its first bucket: all of a map of up to 8 labels (more are cut
 * and counted); returns 0, -1: fault.
 */
static __always_inline int go_map_labels(u64 set, struct go_label *labels, struct go_map_bucket *b, u32 *truncated)
{
	struct go_hmap h = {};
	u64 hmap = 0;

#pragma unroll
	for (int i = 0; i < GO_LABELS_MAX; i++)
		labels[i].key_len = GO_LABEL_ABSENT;
	if (bpf_probe_read_user(&hmap, sizeof(hmap), (void *)set))
		return -1;
	if (!hmap)
		return 0;
	if (bpf_probe_read_user(&h, sizeof(h), (void *)hmap))
		return -1;
	if (!h.count)
		return 0;
	if (h.log2_buckets || h.oldbuckets || h.noverflow) /* entries in other buckets: not read */
		*truncated = 1;
	if (bpf_probe_read_user(b, sizeof(*b), (void *)h.buckets))
		return -1;
#pragma unroll
	for (int j = 0; j < GO_LABELS_MAX; j++) {
		if (b->tophash[j] < GO_MIN_TOP_HASH)
			continue;
		labels[j].key = b->keys[j][0];
		labels[j].key_len = b->keys[j][1];
		labels[j].value = b->values[j][0];
		labels[j].value_len = b->values[j][1];
	}
	return 0;
}

/* raw's offsets are masked to this: a stable bound the verifier prunes on. */
#define GO_RAW_MASK 1023
/*
 * A string stored by reference: this byte (no length is), its address (6
 * bytes, little endian), its length (a byte); GO_STRING_REF_SIZE in all.
 */
#define GO_STRING_REF 0xff
#define GO_STRING_REF_SIZE 8

/*
 * Stores the string at addr of len bytes (cut to max) to raw at off: a
 * reference when it is in the executable's read-only segment (a literal,
 * immutable), else a length byte and the bytes read; returns the offset
 * after it, or -1 when it cannot be read. raw has GO_RAW_MASK + 1 + 255
 * bytes at least.
 */
static __always_inline int go_copy_string(const struct go_labels_proc *p, u8 *raw, u32 off, u64 addr, u64 len, u32 max,
					  u32 *truncated)
{
	u32 o = off & GO_RAW_MASK;

	if (len > max) {
		*truncated = 1;
		len = max;
	}
	if (len && addr >= p->strings_lo && addr + len <= p->strings_hi) {
		/* user space keeps strings_hi below 2^48: the address fits 6 bytes */
		*(u64 *)(raw + o) = GO_STRING_REF | addr << 8;
		raw[o + 7] = len;
		return (o + GO_STRING_REF_SIZE) & GO_RAW_MASK;
	}
	raw[o] = len;
	/*
	 * Bounded by a mask (no-op: len <= max) the verifier sees on the
	 * register the call takes: 5.10's does not carry a bound a comparison
	 * learnt to the register's copies.
	 */
	barrier_var(len);
	len &= 0xff;
	if (len && bpf_probe_read_user(raw + o + 1, len, (void *)addr))
		return -1;
	return (o + 1 + len) & GO_RAW_MASK; /* go_labels_copy keeps it below: the mask bounds, never cuts */
}

#endif /* BPFPROFILER_GOLABELS_H */
