/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A goroutine's runtime/pprof label set (pprof.Do, SetGoroutineLabels),
 * from its g.labels: the string headers of up to GO_LABELS_MAX labels,
 * and their bytes copied as klen, key, vlen, value (a literal string by
 * reference when the process's read-only segment is known). The samplers
 * (golabels.h) and the Go probes (probe.bpf.c) read them alike.
 */
#ifndef BPFPROFILER_GOLABELSET_H
#define BPFPROFILER_GOLABELSET_H

#include "common.h"

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

/* Bytes of a label set packed at most (THREAD_CTX_ATTRS_MAX: what a sample's attributes hold). */
#define GO_LABELS_BYTES_MAX 616

/*
 * Packs the labels whose string headers are in labels (absent ones
 * skipped) into raw, a klen, key, vlen, value after another, at most
 * GO_LABELS_BYTES_MAX bytes (raw has GO_RAW_MASK + 1 + 256); *offset is
 * map memory the offset is read back from. Sets *truncated when labels are
 * cut or left out for room, *lost when one cannot be read (it and those
 * after it are left out). Returns the bytes packed.
 */
static __always_inline u32 go_pack_labels(const struct go_labels_proc *p, struct go_label *labels, u8 *raw, u64 *offset,
					  u32 *truncated, u32 *lost)
{
	int off, next;

	/*
	 * Read back from the map: from a known offset, a reference's constant
	 * size would give known offsets, and paths through references and
	 * copies would never prune.
	 */
	*offset = 0;
	off = *(volatile u64 *)offset & GO_RAW_MASK;
#pragma clang loop unroll(disable)
	for (u32 i = 0; i < GO_LABELS_MAX; i++) {
		struct go_label *l = &labels[i];
		u64 klen, vlen;

		if (l->key_len == GO_LABEL_ABSENT)
			continue;
		klen = l->key_len < GO_LABEL_KEY_MAX ? l->key_len : GO_LABEL_KEY_MAX;
		vlen = l->value_len < GO_LABEL_VALUE_MAX ? l->value_len : GO_LABEL_VALUE_MAX;
		/* room for both copied (a reference, 8 bytes, is at most 7 more): few branches to verify */
		if (off + 2 * GO_STRING_REF_SIZE + klen + vlen > GO_LABELS_BYTES_MAX) {
			*truncated = 1;
			break;
		}
		next = go_copy_string(p, raw, off, l->key, l->key_len, GO_LABEL_KEY_MAX, truncated);
		if (next >= 0)
			next = go_copy_string(p, raw, next, l->value, l->value_len, GO_LABEL_VALUE_MAX, truncated);
		if (next < 0) {
			*lost = 1; /* this label and those after it */
			break;
		}
		off = next;
	}
	return off > 0 ? off : 0;
}

#endif /* BPFPROFILER_GOLABELSET_H */
