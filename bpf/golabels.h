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
#include "golabelset.h"

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

#endif /* BPFPROFILER_GOLABELS_H */
