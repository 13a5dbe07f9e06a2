/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The OpenTelemetry thread context of the current thread (OTEP 4947): the
 * TLS pointer otel_thread_ctx_v1 an SDK sets to the record of the span the
 * thread works for. User space finds where the pointer is for a process
 * (internal/threadctx.Location: an offset from the thread pointer, or a
 * module's block in the thread's dynamic thread vector) and fills
 * context_procs[pid]; a sample reads the pointer and the record while
 * the thread is stopped, and puts its trace and span ids into the key and
 * its attributes (a size word, then the bytes as read) into
 * thread_ctx_attrs under their hash: the key's trace_attrs_id. That map is
 * not drained by generation: attributes repeat, an LRU keeps the recent.
 * A Go process's goroutine labels (golabels.h) take the same way, to the
 * key's go_labels_id; a process has one or the other, the OTEP's first.
 * One entry a process holds where both are: one lookup a sample, none
 * for a process that publishes nothing (context_pids).
 */
#ifndef BPFPROFILER_THREADCTX_H
#define BPFPROFILER_THREADCTX_H

#include "common.h"
#include "arch.h"

/* Attribute bytes kept per record: the OTEP's 640-byte record less its 28 and a word's tail. */
#define THREAD_CTX_ATTRS_MAX 616
/* Stored attributes: a size word, then the bytes, 8 a word (the last zero-padded). */
#define THREAD_CTX_ATTR_WORDS (1 + (THREAD_CTX_ATTRS_MAX + 7) / 8)
/* The OTEP record's fixed part: ids, valid, flags, the attributes' size. */
#define THREAD_CTX_FIXED 28
/* Bounds offsets into the attribute bytes for the verifier (no-op: they stay below THREAD_CTX_ATTRS_MAX). */
#define THREAD_CTX_PACK_MASK 1023
/* Marks the size word: a stored value is never all zero. */
#define THREAD_CTX_WORD_MARK (1ULL << 63)

#include "golabels.h"

/* Where a process's threads keep otel_thread_ctx_v1 (threadctx.Location). */
struct thread_ctx_proc {
	s64 offset; /* from the thread pointer (module 0), or in the module's block */
	u64 module; /* 0: static TLS; else the module's index in the thread's vector */
};

/* What a process publishes (context_proc.sources). */
enum context_source {
	CONTEXT_OTEP = 1, /* an OTEP 4947 variable: otep */
	CONTEXT_GO = 2,	  /* goroutine labels: go */
};

/* Where a process publishes its context: each source it has. */
struct context_proc {
	struct thread_ctx_proc otep;
	struct go_labels_proc go;
	u32 sources; /* enum context_source bits */
	u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32); /* pid as the collector sees it */
	__type(value, struct context_proc);
} context_procs SEC(".maps");

/* PID_MAX_LIMIT's words of context_pids. */
#define CONTEXT_PID_WORDS 65536

/*
 * A bit a pid (pid / 64's word, pid % 64's bit), set while context_procs
 * holds the pid's entry: a sample of a process that publishes nothing
 * looks no further (an array's lookup is inlined, no helper call). User
 * space sizes it to pid_max; a pid past it is looked up in context_procs.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CONTEXT_PID_WORDS);
	__type(key, u32);
	__type(value, u64);
} context_pids SEC(".maps");

/* Whether pid may have an entry in context_procs. */
static __always_inline int context_may_publish(u32 pid)
{
	u32 word = pid / 64;
	const u64 *bits = bpf_map_lookup_elem(&context_pids, &word);

	return !bits || (*bits >> (pid & 63)) & 1;
}

/*
 * An OTEP record: trace id (16 bytes), span id (8), valid (1), trace flags
 * (1), the attributes' size (u16, native endian), then the attributes.
 */

/*
 * Per-CPU buffers. A record is read to fixed, so that its attributes land
 * in raw, 8-aligned after the size word: what is stored starts at
 * size_word, with no copy. Go labels are copied into raw too.
 */
struct thread_ctx_scratch {
	u8 lead[4];			/* aligns size_word */
	u8 fixed[THREAD_CTX_FIXED - 8]; /* the record's first 20 bytes */
	u64 size_word;			/* the record's next 8; then THREAD_CTX_WORD_MARK | the attributes' size */
	/* Go labels' bytes are copied at masked offsets (go_copy_string). */
	u8 raw[GO_RAW_MASK + 1 + 256];
	struct go_label labels[GO_LABELS_MAX]; /* golabels.h: the string headers read */
	struct go_map_bucket bucket;
	u8 g_block[GO_G_BLOCK]; /* golabels.h: g.m to g.labels */
	u64 size;		/* the bytes of raw to store, read back (thread_ctx_read) */
	u64 offset;		/* go_labels_copy's offset in raw, read back */
	/* What this CPU stored or found last: its words under last_id (last_count of them; 0: none). */
	u64 last_words[THREAD_CTX_ATTR_WORDS];
	s32 last_id;
	u32 last_count;
	u32 last_hits; /* found in last_words since the map was last looked up */
	u32 reserved;
};

/*
 * A CPU's last words are found in its copy but every this many times in
 * the map: that lookup keeps them recent in its LRU.
 */
#define THREAD_CTX_TOUCH_EVERY 16

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct thread_ctx_scratch);
} thread_ctx_scratch SEC(".maps");

/* The address of the current thread's otel_thread_ctx_v1 (0: none). */
static __always_inline u64 thread_ctx_variable(const struct thread_ctx_proc *p)
{
	u64 tp = user_thread_pointer(), dtv = 0, length = 0, block = 0;

	if (!tp)
		return 0;
	if (!p->module)
		return tp + p->offset;
	/* glibc's vector: its length before the element the TCB points at, then 16 bytes a module. */
	if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + TCB_DTV)) ||
	    bpf_probe_read_user(&length, sizeof(length), (void *)(dtv - 16)) || p->module > length ||
	    bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 16 * p->module)))
		return 0;
	if (!block || block == ~0ULL) /* not allocated in this thread yet */
		return 0;
	return block + p->offset;
}

/*
 * Ends the n attribute bytes in sc->raw with the size word and zeroes the
 * two words' worth past them (thread_ctx_hash reads one more when their
 * count is odd); returns the words to store (the size word's and the
 * bytes').
 */
static __always_inline u32 thread_ctx_seal(struct thread_ctx_scratch *sc, u32 n)
{
	u32 end = n;

	sc->size_word = THREAD_CTX_WORD_MARK | n;
	barrier_var(end); /* keeps the mask: the compiler knows it a no-op, the verifier does not */
	*(u64 *)(sc->raw + (end & THREAD_CTX_PACK_MASK)) = 0;
	*(u64 *)(sc->raw + ((end + 8) & THREAD_CTX_PACK_MASK)) = 0;
	return 1 + (n + 7) / 8;
}

/*
 * A hash of the first count words (and a zero one past them when count is
 * odd), as a non-negative id: two lanes, even and odd words, so that the
 * multiplications of one do not wait for the other's.
 */
static __always_inline s32 thread_ctx_hash(const u64 *words, u32 count)
{
	u64 a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;

#pragma clang loop unroll(disable)
	for (u32 i = 0; i < THREAD_CTX_ATTR_WORDS; i += 2) {
		if (i >= count)
			break;
		a ^= words[i];
		b ^= words[i + 1];
		a *= 0x9e3779b97f4a7c15ULL;
		b *= 0xc2b2ae3d27d4eb4fULL;
		a ^= a >> 29;
		b ^= b >> 31;
	}
	a ^= b * 0x165667b19e3779f9ULL;
	return (s32)((a ^ (a >> 32)) & 0x7fffffff);
}

/* Copies the first count words of src to dst. */
static __always_inline void thread_ctx_copy(u64 *dst, const u64 *src, u32 count)
{
#pragma clang loop unroll(disable)
	for (u32 i = 0; i < THREAD_CTX_ATTR_WORDS; i++) {
		if (i >= count)
			break;
		dst[i] = src[i];
	}
}

/* Whether a and b have the same first count words. */
static __always_inline int thread_ctx_same(const u64 *a, const u64 *b, u32 count)
{
#pragma clang loop unroll(disable)
	for (u32 i = 0; i < THREAD_CTX_ATTR_WORDS; i++) {
		if (i >= count)
			break;
		if (a[i] != b[i])
			return 0;
	}
	return 1;
}

/* Packed attributes by their hash (the keys' trace_attrs_id). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64[THREAD_CTX_ATTR_WORDS]);
} thread_ctx_attrs SEC(".maps");

/* What the last thread_ctx_read on this CPU found. */
struct thread_ctx_result {
	u8 trace_id[16]; /* zero unless outcome is THREAD_CTX_LINKED */
	u8 span_id[8];
	s32 attrs_id;	  /* the attributes' key in thread_ctx_attrs; -1: none */
	u32 go_labels_id; /* the Go labels' key in thread_ctx_attrs; 0: none */
	u32 outcome;	  /* enum thread_ctx_outcome; NR_THREAD_CTX: the process publishes none */
	u32 truncated;	  /* 1: the attributes were cut to THREAD_CTX_ATTRS_MAX */
	u32 lost;	  /* 1: the attributes could not be read or stored */
	u32 go_truncated; /* 1: Go labels were cut (golabels.h bounds) */
	u32 go_lost;	  /* 1: Go labels could not be read or stored */
	u32 reserved;	  /* explicit padding */
	u64 goroutine;	  /* the g of the goroutine the thread runs (golabels.h); 0: none known */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct thread_ctx_result);
} thread_ctx_results SEC(".maps");

/* Bytes of a record read at once: its fixed part and the attributes kept. */
#define THREAD_CTX_RECORD_MAX (THREAD_CTX_FIXED + THREAD_CTX_ATTRS_MAX)
#define THREAD_CTX_PAGE 4096

/*
 * Reads the OTEP record of thread context p locates into r, its attribute
 * bytes into sc->raw; returns how many. The record is read whole at once
 * up to its page's end (the thread is stopped: no torn record), then what
 * it has past that.
 */
static __always_inline u32 thread_ctx_record(const struct thread_ctx_proc *p, struct thread_ctx_result *r,
					     struct thread_ctx_scratch *sc)
{
	const u8 *fixed = sc->fixed; /* the record's 28 bytes: through size_word */
	u64 var, rec = 0, ids = 0;
	u32 n, size;

	r->outcome = THREAD_CTX_READ_FAULT;
	var = thread_ctx_variable(p);
	if (!var || bpf_probe_read_user(&rec, sizeof(rec), (void *)var))
		return 0;
	r->outcome = THREAD_CTX_NONE;
	if (!rec)
		return 0;
	r->outcome = THREAD_CTX_READ_FAULT;
	size = THREAD_CTX_PAGE - (rec & (THREAD_CTX_PAGE - 1));
	size = size < THREAD_CTX_FIXED ? THREAD_CTX_FIXED : size; /* the fixed part spans pages */
	size = size > THREAD_CTX_RECORD_MAX ? THREAD_CTX_RECORD_MAX : size;
	barrier_var(size); /* a mask on the helper's register, for 5.10 (see go_copy_string) */
	size &= 1023;
	if (bpf_probe_read_user(sc->fixed, size, (void *)rec))
		return 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		ids |= fixed[i];
	r->outcome = THREAD_CTX_INVALID;
	if (fixed[24] != 1 || !ids) /* valid */
		return 0;
	__builtin_memcpy(r->trace_id, fixed, sizeof(r->trace_id));
	__builtin_memcpy(r->span_id, fixed + 16, sizeof(r->span_id));
	r->outcome = THREAD_CTX_LINKED;
	n = fixed[26] | (u32)fixed[27] << 8; /* attrs_size: little endian on both targets */
	if (!n)
		return 0;
	if (n > THREAD_CTX_ATTRS_MAX) {
		r->truncated = 1;
		n = THREAD_CTX_ATTRS_MAX;
	}
	if (THREAD_CTX_FIXED + n <= size)
		return n;
	barrier_var(n); /* a mask on the helper's register, for 5.10 (see go_copy_string) */
	n &= 1023;
	if (bpf_probe_read_user(sc->raw, n, (void *)(rec + THREAD_CTX_FIXED))) {
		r->lost = 1;
		return 0;
	}
	return n;
}

/*
 * Copies the labels of the goroutine the current thread runs, in process
 * p, into sc->raw (klen, key, vlen, value, ...); uregs are the thread's
 * user registers when the caller has them (go_register_g). Returns how
 * many bytes.
 */
static __always_inline u32 go_labels_copy(const struct go_labels_proc *p, const u64 *uregs, struct thread_ctx_result *r,
					  struct thread_ctx_scratch *sc)
{
	u64 g = 0, sp = 0, curg = GO_NO_GOROUTINE, set = 0;
	int off = 0, next, from_register;

	r->outcome = THREAD_CTX_GO_READ_FAULT;
	from_register = go_register_g(p, uregs, &g, &sp);
	if (from_register)
		curg = go_user_goroutine(p, g, sp, 1, sc->g_block, &set);
	if (curg == GO_NO_GOROUTINE && !p->g_register) {
		g = go_tls_g(p);
		curg = go_user_goroutine(p, g, sp, 0, sc->g_block, &set);
	}
	if (curg == GO_NO_GOROUTINE)
		return 0;
	r->goroutine = curg;
	r->outcome = THREAD_CTX_GO_NONE;
	/* No layout: the process sets no labels, only its goroutine is wanted (scopes.h). */
	if (!curg || !p->layout)
		return 0;
	r->outcome = THREAD_CTX_GO_READ_FAULT;
	if (curg != g && bpf_probe_read_user(&set, sizeof(set), (void *)(curg + p->g_labels)))
		return 0;
	r->outcome = THREAD_CTX_GO_NONE;
	if (!set)
		return 0;
	if (p->layout == GO_LABELS_SLICE)
		next = go_slice_labels(set, sc->labels, &r->go_truncated);
	else
		next = go_map_labels(set, sc->labels, &sc->bucket, &r->go_truncated);
	if (next) {
		r->outcome = THREAD_CTX_GO_READ_FAULT;
		return 0;
	}
	off = go_pack_labels(p, sc->labels, sc->raw, &sc->offset, &r->go_truncated, &r->go_lost);
	r->outcome = off > 0 ? THREAD_CTX_GO_FOUND : THREAD_CTX_GO_NONE;
	return off > 0 ? off : 0;
}

/*
 * Reads the current thread's context, when process pid publishes one (an
 * OTEP record, else Go labels), into this CPU's thread_ctx_results, and
 * stores its attributes in thread_ctx_attrs. uregs: the thread's user
 * registers when the caller has them (a sample in user mode), else 0.
 * Once per sample: the store is verified at each call site.
 */
static __always_inline void thread_ctx_read(u32 pid, const u64 *uregs)
{
	const struct context_proc *p = 0;
	struct thread_ctx_scratch *sc;
	struct thread_ctx_result *r;
	u32 zero = 0, n, count, otep;
	const u64 *old;
	s32 hash;

	r = bpf_map_lookup_elem(&thread_ctx_results, &zero);
	if (!r)
		return;
	__builtin_memset(r, 0, sizeof(*r));
	r->attrs_id = -1;
	r->outcome = NR_THREAD_CTX;
	if (context_may_publish(pid))
		p = bpf_map_lookup_elem(&context_procs, &pid);
	if (!p || !(p->sources & (CONTEXT_OTEP | CONTEXT_GO)))
		return;
	sc = bpf_map_lookup_elem(&thread_ctx_scratch, &zero);
	if (!sc)
		return;
	otep = p->sources & CONTEXT_OTEP;
	/*
	 * Read back from the map: the verifier then checks the store for one
	 * range of sizes, not once for each range the reads left.
	 */
	sc->size = otep ? thread_ctx_record(&p->otep, r, sc) : go_labels_copy(&p->go, uregs, r, sc);
	n = *(volatile u64 *)&sc->size;
	if (!n || n > THREAD_CTX_ATTRS_MAX)
		return;
	count = thread_ctx_seal(sc, n);
	/*
	 * A thread sampled again mostly has what it had: the words this CPU
	 * stored or found last, compared, spare the hash and the map. A map
	 * stores words only under their hash, so the id is theirs.
	 */
	hash = sc->last_id;
	if (hash <= 0 || sc->last_count != count || !(++sc->last_hits % THREAD_CTX_TOUCH_EVERY) ||
	    !thread_ctx_same(sc->last_words, &sc->size_word, count)) {
		hash = thread_ctx_hash(&sc->size_word, count);
		old = bpf_map_lookup_elem(&thread_ctx_attrs, &hash);
		if ((!otep && !hash) ||
		    (old ? !thread_ctx_same(old, &sc->size_word, count)
			 : bpf_map_update_elem(&thread_ctx_attrs, &hash, &sc->size_word, BPF_ANY))) {
			/*
			 * Another record's attributes have the hash, or the map
			 * refused (or 0, none, for Go): no id, and none from the
			 * copy either until words are stored again.
			 */
			sc->last_id = 0;
			if (otep)
				r->lost = 1;
			else
				r->go_lost = 1;
			return;
		}
		sc->last_id = hash;
		sc->last_count = count;
		sc->last_hits = 0;
		thread_ctx_copy(sc->last_words, &sc->size_word, count);
	}
	if (otep)
		r->attrs_id = hash;
	else
		r->go_labels_id = hash;
}

/*
 * Puts the context r read into key (zero ids: none) and counts it in st.
 * Few branches: the off-CPU programs reach it in many states.
 */
static __always_inline void thread_ctx_key(const struct thread_ctx_result *r, struct stack_key *key,
					   struct sampler_stats *st)
{
	u32 outcome = r->outcome;

	if (outcome < NR_THREAD_CTX)
		st->thread_ctx[outcome]++;
	__builtin_memcpy(key->trace_id, r->trace_id, sizeof(r->trace_id));
	__builtin_memcpy(key->span_id, r->span_id, sizeof(r->span_id));
	key->trace_attrs_id = r->attrs_id;
	key->go_labels_id = r->go_labels_id;
	st->thread_ctx_attrs_truncated += r->truncated;
	st->thread_ctx_attrs_lost += r->lost;
	st->go_labels_truncated += r->go_truncated;
	st->go_labels_lost += r->go_lost;
}

/*
 * thread_ctx_key of what the last thread_ctx_read on this CPU found;
 * returns the goroutine it found (0: none).
 */
static __always_inline u64 thread_ctx_store(struct stack_key *key, struct sampler_stats *st)
{
	struct thread_ctx_result *r;
	u32 zero = 0;

	key->trace_attrs_id = -1;
	r = bpf_map_lookup_elem(&thread_ctx_results, &zero);
	if (!r)
		return 0;
	thread_ctx_key(r, key, st);
	return r->goroutine;
}

#endif /* BPFPROFILER_THREADCTX_H */
