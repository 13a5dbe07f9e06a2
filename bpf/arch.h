/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What differs between the architectures the programs are built for
 * (bpf2go -target amd64,arm64 defines __TARGET_ARCH_x86 or
 * __TARGET_ARCH_arm64): where the user registers sit in a pt_regs, how a
 * sample tells user mode, the kernel stack size, the thread pointer, and
 * what a return address may carry.
 */
#ifndef BPFPROFILER_ARCH_H
#define BPFPROFILER_ARCH_H

#include "common.h"

/*
 * Set by user space: the kernel has bpf_task_pt_regs (Linux 5.15), which
 * knows where the saved user registers are (below a padding on kernels
 * built with FRED, 6.9+). Older kernels have none of that padding. Such
 * kernels also let a program load a task's fields through
 * bpf_get_current_task_btf (5.11) without a helper's copy.
 */
const volatile u8 have_task_pt_regs = 0;

#if defined(__TARGET_ARCH_x86)

/* struct pt_regs (the ptrace ABI): offsets of what the walk needs. */
#define UREGS_GO_G 8 /* r14, Go's g register in Go code (ABIInternal) */
#define UREGS_BP 32
#define UREGS_IP 128
#define UREGS_CS 136
#define UREGS_SP 152
/* Go ABIInternal's first three integer argument registers: rax, rbx, rcx. */
#define UREGS_GO_ARG0 80
#define UREGS_GO_ARG1 40
#define UREGS_GO_ARG2 88
/* x86-64 kernel stacks (without KASAN); pt_regs are at their top. */
#define THREAD_SIZE 16384
#define UREGS_SIZE 168

/* A perf sample's registers are user ones (the code segment's RPL). */
static __always_inline int user_mode_regs(const u64 *r)
{
	return (r[UREGS_CS / 8] & 3) != 0;
}

struct thread_struct___x86 {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___x86 {
	struct thread_struct___x86 thread;
} __attribute__((preserve_access_index));

/* The user thread pointer of the current task (the fs base). */
static __always_inline u64 user_thread_pointer(void)
{
	struct task_struct___x86 *task;

	if (have_task_pt_regs) {
		task = (void *)bpf_get_current_task_btf();
		return task->thread.fsbase; /* a load, no helper */
	}
	task = (void *)bpf_get_current_task();
	return BPF_CORE_READ(task, thread.fsbase);
}

/*
 * Whether pthread id (glibc's and musl's pthread_self) is the thread whose
 * thread pointer is tp: on x86-64 the thread pointer is the pthread itself.
 */
static __always_inline int pthread_of(u64 id, u64 tp)
{
	return id == tp;
}

/*
 * A signal frame's registers, from rsp in the trampoline (glibc's
 * __restore_rt, whose CFI says so): struct rt_sigframe starts with the
 * return address; its ucontext's sigcontext holds rbp, rsp and rip here.
 */
#define SIGFRAME_FP 120
#define SIGFRAME_SP 160
#define SIGFRAME_IP 168

/* Where the thread control block (at the thread pointer) holds the dynamic thread vector (glibc's tcbhead_t). */
#define TCB_DTV 8

/* Return addresses carry nothing but the address. */
#define RETURN_ADDRESS(ra) (ra)

/* Address bits of the in-place runtime frame words (hotspot.h, v8.h): user
 * addresses are below 2^47; a word's position gets the 16 bits above. */
#define IN_PLACE_ADDR_BITS 47

/* At a function's first instruction (a uprobe), its return address: on top of the stack. */
static __always_inline u64 entry_return_address(const u64 *r)
{
	u64 ra = 0;

	if (bpf_probe_read_user(&ra, sizeof(ra), (const void *)r[UREGS_SP / 8]))
		return 0;
	return ra;
}

#elif defined(__TARGET_ARCH_arm64)

/* struct user_pt_regs, at the start of struct pt_regs: regs[31], sp, pc, pstate. */
#define UREGS_BP (29 * 8)   /* x29, the frame pointer */
#define UREGS_LR (30 * 8)   /* x30, the link register */
#define UREGS_GO_G (28 * 8) /* x28, Go's g register */
#define UREGS_SP 248
/* Go ABIInternal's first three integer argument registers: x0, x1, x2. */
#define UREGS_GO_ARG0 0
#define UREGS_GO_ARG1 8
#define UREGS_GO_ARG2 16
#define UREGS_IP 256
#define UREGS_PSTATE 264
/* arm64 kernel stacks with 4 KiB pages (without KASAN). */
#define THREAD_SIZE 16384

struct pt_regs___bpfprofiler {
	u64 regs[31];
} __attribute__((preserve_access_index));

/* struct pt_regs grew over releases: its size comes from the kernel's BTF. */
#define UREGS_SIZE bpf_core_type_size(struct pt_regs___bpfprofiler)

/* A perf sample's registers are user ones: EL0, and AArch64 (not a compat task). */
static __always_inline int user_mode_regs(const u64 *r)
{
	return (r[UREGS_PSTATE / 8] & 0x1f) == 0;
}

struct thread_struct___arm64 {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));

struct task_struct___arm64 {
	struct thread_struct___arm64 thread;
} __attribute__((preserve_access_index));

/* The user thread pointer of the current task (tpidr_el0). */
static __always_inline u64 user_thread_pointer(void)
{
	struct task_struct___arm64 *task;

	if (have_task_pt_regs) {
		task = (void *)bpf_get_current_task_btf();
		return task->thread.uw.tp_value; /* a load, no helper */
	}
	task = (void *)bpf_get_current_task();
	return BPF_CORE_READ(task, thread.uw.tp_value);
}

/*
 * Whether pthread id is the thread whose thread pointer is tp: on arm64 the
 * thread pointer points just past the struct pthread (glibc: THREAD_SELF is
 * tp - sizeof(struct pthread); musl alike), well within a page of it.
 * Threads' pthreads are a stack apart, so no other thread matches.
 */
static __always_inline int pthread_of(u64 id, u64 tp)
{
	return id < tp && tp - id <= 4096;
}

/*
 * The signal trampoline, the vdso's __kernel_rt_sigreturn, has no CFI: it
 * is known by its two instructions (mov x8, #__NR_rt_sigreturn; svc #0),
 * as libgcc and gdb know it. At it, sp is the kernel's struct rt_sigframe:
 * siginfo (128 bytes), then the ucontext, whose sigcontext (at 176) holds
 * regs[31], sp and pc after the fault address. gdb reads the same offsets.
 */
#define SIGRETURN_CODE 0xd4000001d2801168ULL
#define SIGFRAME_CONTEXT (128 + 176)
#define SIGFRAME_FP (SIGFRAME_CONTEXT + 8 + 29 * 8)
#define SIGFRAME_LR (SIGFRAME_CONTEXT + 8 + 30 * 8)
#define SIGFRAME_SP (SIGFRAME_CONTEXT + 8 + 31 * 8)
#define SIGFRAME_IP (SIGFRAME_CONTEXT + 8 + 32 * 8)

/* Where the thread control block (at the thread pointer) holds the dynamic thread vector (glibc's tcbhead_t). */
#define TCB_DTV 0

/* Pointer authentication signs return addresses in their top bits (48-bit user addresses). */
#define RETURN_ADDRESS(ra) ((ra) & ((1ULL << 48) - 1))

/* x30 after a frame-pointer stack's pc, its leaf's caller perhaps
 * (cpu.bpf.c): bits 56-62 set, which no user address (below 2^52) has, and
 * not bit 63 (the runtime frame words'). */
#define LINK_REGISTER_WORD(lr) ((0x7fULL << 56) | (lr))

/* Address bits of the in-place runtime frame words (hotspot.h, v8.h): user
 * addresses reach 2^48 (mmap places memory just below it); a word's
 * position gets the 15 bits above. */
#define IN_PLACE_ADDR_BITS 48

/* At a function's first instruction (a uprobe), its return address: in the link register. */
static __always_inline u64 entry_return_address(const u64 *r)
{
	return RETURN_ADDRESS(r[UREGS_LR / 8]);
}

#else
#error "bpfprofiler's programs are built for x86-64 and arm64 (bpf2go -target amd64,arm64)"
#endif

#endif /* BPFPROFILER_ARCH_H */
