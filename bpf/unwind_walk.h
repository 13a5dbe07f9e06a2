/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The walk of a user stack with the unwind tables of unwind.h: one frame a
 * step (unwind_step), by the frame's CFI row, or by its frame pointer where
 * it has none. A frame-pointer frame of a mapping that carries a runtime id
 * is first handed to that runtime's walker through runtimes.h's dispatch,
 * which may step out of it itself (HotSpot's compiled frames keep no frame
 * pointer) or tell what it runs (a word after its pc). The walk names no
 * runtime.
 */
#ifndef BPFPROFILER_UNWIND_WALK_H
#define BPFPROFILER_UNWIND_WALK_H

#include "unwind.h"
#include "runtimes.h"

/*
 * Out of a signal trampoline at regs: the interrupted registers, from the
 * kernel's signal frame at sp. Returns -2 (the ip is an interrupted one, not
 * a return address) or UNWIND_END_READ_FAULT.
 */
static __always_inline int signal_frame(struct user_regs *regs)
{
	u64 ip, sp;

	if (read_user_u64(&regs->bp, regs->sp + SIGFRAME_FP) || read_user_u64(&ip, regs->sp + SIGFRAME_IP) ||
	    read_user_u64(&sp, regs->sp + SIGFRAME_SP))
		return UNWIND_END_READ_FAULT;
#ifdef SIGFRAME_LR
	/* The interrupted function may not have saved its return address yet. */
	if (read_user_u64(&regs->lr, regs->sp + SIGFRAME_LR))
		return UNWIND_END_READ_FAULT;
#endif
	regs->ip = ip;
	regs->sp = sp;
	regs->sp_guessed = 0;
	return -2;
}

/*
 * Whether regs->ip, a return address, is arm64's signal trampoline (the
 * vdso's, which no table describes: the loader maps the vdso as anonymous
 * code): then its frame is stepped out of into *r.
 */
static __always_inline int signal_trampoline(struct user_regs *regs, int first, int *r)
{
#ifdef SIGRETURN_CODE
	u64 code;

	if (!first && !read_user_u64(&code, regs->ip) && code == SIGRETURN_CODE) {
		*r = signal_frame(regs);
		return 1;
	}
#endif
	return 0;
}

/*
 * One frame up from regs (the frame of a function at regs->ip): sets regs
 * to the caller's. Returns an enum unwind_end reason to stop, or -1 to go
 * on. first says regs are the interrupted ones (ip is the faulting or
 * interrupted instruction, not a return address). A runtime's frame that
 * carries more than its pc sets *word (IN_PLACE_WORD), as does arm64's x30
 * where it may be the caller of an interrupted frame walked by its frame
 * pointer (LINK_REGISTER_WORD).
 */
static __always_inline int unwind_step(struct user_regs *regs, u32 pid, int first, u64 *word)
{
	struct unwind_mapping *m;
	struct unwind_row *row;
	u32 rule;
	u64 cfa, ra, fp = regs->bp;
	s64 fp_slot = 0;  /* the caller's frame pointer is saved at CFA + fp_slot; 0: not saved */
	s64 ra_slot = -8; /* the return address is saved at CFA + ra_slot; 0: in the link register */
	int leaf = 0;	  /* the return address came from the link register */
	/* A return address is after its call: look up the call itself. */
	u64 lookup = first ? regs->ip : regs->ip - 1;
	u64 pc;
	int r;

	m = find_mapping(pid, lookup);
	if (!m)
		return signal_trampoline(regs, first, &r) ? r : UNWIND_END_NO_MAPPING;
	if (!m->rows) {
		/* Its table was evicted: a rescan loads it again. */
		if (m->table == UNWIND_TABLE_EVICTED)
			return UNWIND_END_NO_MAPPING;
		if (m->table == UNWIND_TABLE_ANON && signal_trampoline(regs, first, &r))
			return r;
		goto frame_pointer;
	}
	pc = lookup - m->bias;
	if (pc >> 32)
		return UNWIND_END_NO_MAPPING;
	row = find_row(m->table, m->rows, (u32)pc);
	if (!row)
		return UNWIND_END_NO_MAPPING;
	rule = row->rule;
	switch (ROW_KIND(rule)) {
	case UNWIND_CFA:
		cfa = (ROW_CFA_FP(rule) ? regs->bp : regs->sp) + ROW_CFA_OFFSET(rule);
		fp_slot = ROW_FIELD(rule) * 8;
		ra_slot = ROW_RA_SLOT(rule) * 8;
		if (ROW_RECORD(rule)) {
			/* Saved at the CFA register itself: x29 then x30, or x30 alone. */
			ra_slot = -(s64)ROW_CFA_OFFSET(rule);
			fp_slot = 0;
			if (ROW_FIELD(rule) == ROW_RECORD_AT_BASE) {
				fp_slot = ra_slot;
				ra_slot += 8;
			}
		}
		break;
#if defined(__TARGET_ARCH_x86)
	case UNWIND_PLT:
		/* The entry pushes a word at a fixed offset within its 16 bytes. */
		cfa = regs->sp + ROW_CFA_OFFSET(rule) + ((s64)(lookup & 15) >= ROW_FIELD(rule) ? 8 : 0);
		break;
	case UNWIND_SIGNAL:
		return signal_frame(regs);
#endif
	case UNWIND_NO_CFI:
		goto frame_pointer;
	case UNWIND_STOP:
		return UNWIND_END_ROOT;
	default:
		return UNWIND_END_UNSUPPORTED;
	}
#if defined(__TARGET_ARCH_arm64)
	/* x29 points at the frame record of a function that keeps one (it has
	 * called, so its prologue is done): its CFA, where sp is a guess. */
	if (regs->sp_guessed && fp_slot && !ROW_CFA_FP(rule) && !first)
		cfa = regs->bp - fp_slot;
#endif
	if (ra_slot) {
		if (read_user_u64(&ra, cfa + ra_slot))
			return UNWIND_END_READ_FAULT;
	} else {
		/* arm64: still in the link register, known in the interrupted frame only. */
		if (!first || !regs->lr)
			return UNWIND_END_BAD_FRAME;
		ra = regs->lr;
		leaf = 1;
	}
	if (fp_slot && read_user_u64(&fp, cfa + fp_slot))
		return UNWIND_END_READ_FAULT;
	regs->sp_guessed = 0;
	goto done;

frame_pointer:
	/* The process's runtime may step out of the frame, or tell what it runs. */
	if (m->runtime) {
		r = runtime_step(m->runtime, regs, pid, first, lookup, word);
		if (r != UNWIND_NATIVE_STEP)
			return r;
	}
	/* rbp points at the saved rbp, the return address above it. */
	if (!fp)
		return UNWIND_END_ROOT;
	if (read_user_u64(&ra, fp + 8) || read_user_u64(&fp, fp))
		return UNWIND_END_READ_FAULT;
	cfa = regs->bp + 16;
#if defined(__TARGET_ARCH_arm64)
	regs->sp_guessed = 1;
	/* An interrupted function may have saved no frame record (a leaf, a
	 * prologue): then x30 holds its caller, which the record's return
	 * address skips. It follows the pc as a LINK_REGISTER_WORD, kept by
	 * user space where it is in another function (cpu.bpf.c). */
	if (first && !*word && regs->lr && RETURN_ADDRESS(regs->lr) != RETURN_ADDRESS(ra))
		*word = LINK_REGISTER_WORD(RETURN_ADDRESS(regs->lr));
#endif
done:
	ra = RETURN_ADDRESS(ra);
	if (!ra)
		return UNWIND_END_ROOT;
	/* A frame is above its callee's; a leaf's CFA may be its sp itself. */
	if (cfa < regs->sp || (cfa == regs->sp && !leaf))
		return UNWIND_END_BAD_FRAME;
	regs->ip = ra;
	regs->sp = cfa;
	regs->bp = fp;
	regs->lr = 0;
	return -1;
}

/* A user stack being walked (see unwind_walk_one). */
struct unwind_walk {
	struct user_regs regs;
	u32 pid;    /* as the collector sees it: the key of unwind_mappings */
	u32 frames; /* frames written so far */
	u32 calls;  /* program runs after the first so far */
	u32 first;  /* regs are interrupted ones, not a caller's */
};

/* Frames walked per program run; runs per walk at most UNWIND_WALK_CALLS. */
#define UNWIND_WALK_FRAMES 8
#define UNWIND_WALK_CALLS ((MAX_STACK_DEPTH + UNWIND_WALK_FRAMES - 1) / UNWIND_WALK_FRAMES)

/*
 * Starts a walk of pid's stack from regs (already in w) if its tables know
 * the mapping of the first pc; non-zero otherwise (frame pointers then).
 */
static __always_inline int unwind_walk_start(struct unwind_walk *w, u32 pid)
{
	if (!find_mapping(pid, w->regs.ip))
		return -1;
	w->pid = pid;
	w->frames = 0;
	w->calls = 0;
	w->first = 1;
	return 0;
}

/* Writes w's pc to frames and steps to its caller: an enum unwind_end, or -1 to go on. */
static __always_inline int unwind_walk_one(struct unwind_walk *w, u64 *frames)
{
	u32 n = w->frames;
	u64 word = 0;
	int r;

	if (n >= MAX_STACK_DEPTH)
		return UNWIND_END_DEPTH;
	frames[n] = w->regs.ip;
	w->frames = n + 1;
	r = unwind_step(&w->regs, w->pid, w->first, &word);
	/* A runtime's word follows its frame's pc, when there is room. */
	if (word) {
		u32 m = n + 1;

		asm volatile("" : "+r"(m)); /* the verifier bounds m itself */
		if (m < MAX_STACK_DEPTH) {
			frames[m] = word;
			w->frames = m + 1;
		}
	}
	if (r >= 0)
		return r;
	/* After a signal frame the pc is an interrupted one again. */
	w->first = r == -2;
	return -1;
}

/* Walks up to UNWIND_WALK_FRAMES frames of w; returns an enum unwind_end, or -1 to go on. */
static __always_inline int unwind_walk_some(struct unwind_walk *w, u64 *frames)
{
	int r;

#pragma clang loop unroll(disable)
	for (int i = 0; i < UNWIND_WALK_FRAMES; i++) {
		r = unwind_walk_one(w, frames);
		if (r >= 0)
			return r;
	}
	return -1;
}

/* Zero-terminates the walked frames (see hash_frames); returns their number. */
static __always_inline u32 unwind_walk_end(const struct unwind_walk *w, u64 *frames)
{
	u32 n = w->frames;

	if (n < MAX_STACK_DEPTH)
		frames[n] = 0;
	return n;
}

#endif /* BPFPROFILER_UNWIND_WALK_H */
