/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * CRuby frames of the current thread, read from the VM's own structures.
 *
 * The walker of the CRuby runtime (internal/runtimes/ruby), doing what its
 * reference walk Layout.Walk does (walk.go). User space fills ruby_procs[pid]
 * (Interpreter.WalkerProc) with where the thread's ruby_current_ec is and
 * the struct offsets of the version. The walk then:
 * 1. finds the thread's rb_execution_context_t, the TLS variable
 *    ruby_current_ec, from the thread pointer: through the dtv (dynamic TLS)
 *    or at a fixed distance from it (static TLS);
 * 2. reads the control frames from ec->cfp up to the VM stack's end, leaf
 *    first, writing one word per frame: an iseq frame's iseq (or a method
 *    frame's method entry, which names its class too) and position, a C
 *    frame's method entry, and a flag on the first frame each vm_exec call
 *    pushed (VM_FRAME_FLAG_FINISH).
 */
#ifndef BPFPROFILER_RUBY_H
#define BPFPROFILER_RUBY_H

#include "common.h"
#include "arch.h"

/* A Ruby frame word: object address | position << 48 | vm_exec entry << 63. */
#define RUBY_FRAME_ADDR_BITS 48
#define RUBY_FRAME_ADDR_MASK ((1ULL << RUBY_FRAME_ADDR_BITS) - 1)
#define RUBY_FRAME_POSITION_MAX 0x7fffULL
#define RUBY_FRAME_ENTRY (1ULL << 63)

/* ep[0]'s flags (vm_core.h, one across 3.1 to 3.3). */
#define RUBY_FRAME_MAGIC_MASK 0x7fff0001ULL
#define RUBY_FRAME_MAGIC_METHOD 0x11110001ULL
#define RUBY_FRAME_MAGIC_DUMMY 0x79990001ULL
#define RUBY_FRAME_FLAG_FINISH 0x0020ULL
#define RUBY_FRAME_FLAG_CFRAME 0x0080ULL

/* RBasic.flags of a method entry: T_IMEMO (0x1a) of type imemo_ment (6 at bit 12). */
#define RUBY_IMEMO_TYPE_MASK 0xf01fULL
#define RUBY_IMEMO_MENT 0x601aULL

/* Bounds of Layout.Walk: a VM stack's VALUEs, an iseq's instructions. */
#define RUBY_MAX_STACK_SIZE (1ULL << 28)
#define RUBY_MAX_ISEQ_SIZE (1ULL << 20)

/* Control frames read per walk: MAX_STACK_DEPTH words and up to 17 frames skipped
 * (dummy, not started); each costs the verifier ~340 instructions. */
#define RUBY_MAX_CFPS 144

/* One Ruby process (ruby.Interpreter.WalkerProc; offsets of ruby.Layout). */
struct ruby_proc {
	/* Dynamic TLS: ruby_current_ec's offset in libruby's TLS block; static:
	 * its offset from the thread pointer (may wrap: below tp). */
	u64 tls_offset;
	u64 tls_module; /* dynamic TLS: libruby's module id (dtv index) */
	u32 ec_vm_stack;
	u32 ec_vm_stack_size;
	u32 ec_cfp;
	u32 cfp_pc;
	u32 cfp_iseq;
	u32 cfp_ep;
	u32 cfp_size;
	u32 iseq_body;
	u32 body_iseq_encoded;
	u8 tls_static; /* ec = *(tp + tls_offset), no dtv */
	u8 reserved[3];
};

/* pid (as the collector sees it) -> its VM. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct ruby_proc);
} ruby_procs SEC(".maps");

static __always_inline int ruby_read(void *dst, u32 size, u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

/* The current thread's rb_execution_context_t (ruby_current_ec), or 0. */
static __always_inline u64 ruby_current_ec(const struct ruby_proc *p)
{
	u64 tp = user_thread_pointer(), at = 0, ec = 0;

	if (p->tls_static) {
		at = tp + p->tls_offset;
	} else {
		/* dtv entries are {block, to_free}; -1: not allocated yet. */
		if (ruby_read(&at, sizeof(at), tp + TCB_DTV) || ruby_read(&at, sizeof(at), at + p->tls_module * 16) ||
		    at == (u64)-1)
			return 0;
		at += p->tls_offset;
	}
	if (ruby_read(&ec, sizeof(ec), at))
		return 0;
	return ec;
}

/*
 * A walk's cursor, kept in a map so the verifier sees bounded unknowns
 * rather than one exact value per path (which it could not prune).
 */
struct ruby_walk_state {
	u64 cfp;       /* the next control frame */
	u64 stack_end; /* vm_stack + vm_stack_size VALUEs */
	u32 count;
	s32 end; /* enum runtime_end */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ruby_walk_state);
} ruby_walks SEC(".maps");

/*
 * The object an iseq frame is named by: the iseq, or a method frame's
 * method entry (ep[-2]) when it is one (the class is only reachable from it).
 */
static __always_inline u64 ruby_iseq_object(u64 iseq, u64 flags, u64 me)
{
	u64 me_flags;

	if ((flags & RUBY_FRAME_MAGIC_MASK) == RUBY_FRAME_MAGIC_METHOD && !ruby_read(&me_flags, sizeof(me_flags), me) &&
	    (me_flags & RUBY_IMEMO_TYPE_MASK) == RUBY_IMEMO_MENT)
		return me;
	return iseq;
}

/*
 * One control frame of a walk: writes the frame at w->cfp (unless skipped)
 * and moves to the next one. Returns non-zero when the walk ends (w->end
 * says why).
 */
static __always_inline int ruby_step(const struct ruby_proc *p, struct ruby_walk_state *w, u64 *frames)
{
	/* Not zeroed: a failed read ends the walk before its value is used. */
	u64 cfp = w->cfp, pc, iseq, ep, body, encoded, position = 0, object, word;
	u64 env[3]; /* ep[-2] (method entry or cref), ep[-1], ep[0] (flags) */
	u32 count = w->count;

	if (cfp + p->cfp_size > w->stack_end) {
		w->end = RUNTIME_END_ROOT;
		return 1;
	}
	if (count >= MAX_STACK_DEPTH)
		return 1;
	w->cfp = cfp + p->cfp_size;
	if (ruby_read(&pc, sizeof(pc), cfp + p->cfp_pc) || ruby_read(&iseq, sizeof(iseq), cfp + p->cfp_iseq) ||
	    ruby_read(&ep, sizeof(ep), cfp + p->cfp_ep) || ruby_read(env, sizeof(env), ep - 16))
		goto fault;
	if ((env[2] & RUBY_FRAME_MAGIC_MASK) == RUBY_FRAME_MAGIC_DUMMY)
		return 0;
	if ((env[2] & RUBY_FRAME_FLAG_CFRAME) || !iseq) {
		object = env[0];
	} else {
		/* An iseq frame pushed, not yet run. */
		if (!pc)
			return 0;
		if (ruby_read(&body, sizeof(body), iseq + p->iseq_body) ||
		    ruby_read(&encoded, sizeof(encoded), body + p->body_iseq_encoded) || pc < encoded ||
		    (pc - encoded) / 8 > RUBY_MAX_ISEQ_SIZE)
			goto fault;
		position = (pc - encoded) / 8;
		if (position > RUBY_FRAME_POSITION_MAX)
			position = RUBY_FRAME_POSITION_MAX;
		object = ruby_iseq_object(iseq, env[2], env[0]);
	}
	word = (object & RUBY_FRAME_ADDR_MASK) | (position << RUBY_FRAME_ADDR_BITS);
	if (env[2] & RUBY_FRAME_FLAG_FINISH)
		word |= RUBY_FRAME_ENTRY;
	/* Checked again where it is used: 5.10's verifier loses the bound of a
	 * 32-bit value spilled to the stack (barrier: the compiler keeps this). */
	barrier_var(count);
	if (count >= MAX_STACK_DEPTH)
		return 1;
	frames[count] = word;
	w->count = count + 1;
	return 0;
fault:
	w->end = RUNTIME_END_READ_FAULT;
	return 1;
}

/*
 * Writes the Ruby frames of the current thread to frames (zero-terminated
 * when fewer than MAX_STACK_DEPTH) and returns why the walk ended (enum
 * runtime_end); *n is the number written.
 */
static __always_inline int ruby_walk(const struct ruby_proc *p, u64 *frames, u32 *n)
{
	struct ruby_walk_state *w;
	u64 ec, stack = 0, size = 0, cfp = 0;
	u32 zero = 0, count;

	*n = 0;
	w = bpf_map_lookup_elem(&ruby_walks, &zero);
	if (!w)
		return RUNTIME_END_READ_FAULT;
	ec = ruby_current_ec(p);
	if (!ec)
		return RUNTIME_END_NO_THREAD;
	if (ruby_read(&stack, sizeof(stack), ec + p->ec_vm_stack) ||
	    ruby_read(&size, sizeof(size), ec + p->ec_vm_stack_size) || ruby_read(&cfp, sizeof(cfp), ec + p->ec_cfp) ||
	    size > RUBY_MAX_STACK_SIZE || cfp < stack || cfp > stack + size * 8)
		return RUNTIME_END_READ_FAULT;
	w->cfp = cfp;
	w->stack_end = stack + size * 8;
	w->count = 0;
	w->end = RUNTIME_END_DEPTH;
#pragma clang loop unroll(disable)
	for (int i = 0; i < RUBY_MAX_CFPS; i++) {
		if (ruby_step(p, w, frames))
			break;
	}
	count = w->count;
	if (count < MAX_STACK_DEPTH)
		frames[count] = 0;
	*n = count;
	return w->end;
}

#endif /* BPFPROFILER_RUBY_H */
