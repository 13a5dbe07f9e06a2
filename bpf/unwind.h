/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * User stacks walked with unwind tables built from the files' DWARF CFI
 * (internal/cfi), for code without frame pointers; x86-64 and arm64.
 *
 * Layout (filled by user space, internal/unwinder):
 * - unwind_files: an array of maps, one inner array per loaded file holding
 *   its rows sorted by pc (offset from the file's table base). A row says
 *   how to find the CFA of a frame whose pc is in [row.pc, next row's pc).
 *   Each table is its own allocation, sized to its rows: tables come and go
 *   without fragmenting anything, within a memory budget user space keeps.
 * - unwind_mappings: an LPM trie from (pid, address) to the executable
 *   mapping holding the address: its bias (table pc = address - bias) and
 *   its file's table (UNWIND_TABLE_EVICTED: evicted, the walk ends there
 *   and asks a rescan, which loads it again). Mapping ranges are split into power-of-two aligned
 *   blocks, so one longest-prefix lookup finds the mapping of any address
 *   in O(address bits), for thousands of processes at once. A mapping with
 *   no rows (no CFI: Go, JIT code) is walked with frame pointers. A mapping
 *   of a process running a runtime whose walker reads its frames in place
 *   (JIT code: a JVM's, node's) carries the runtime's id: its frame-pointer
 *   frames are handed to that walker first (runtimes.h).
 * - unwind_table_used: per slot of unwind_files, set by the walks that use
 *   its table, read and cleared by user space to find cold tables.
 * A process with no entry at all is not walked here: its stack is taken
 * with bpf_get_stack (frame pointers), as before its tables are loaded.
 *
 * The walk is a bounded loop of bounded binary searches, so it loads on
 * every kernel from 5.10 (no bpf_loop); it stops at the thread's root (a
 * row whose return address is undefined), at a frame it cannot unwind, or
 * at MAX_STACK_DEPTH, and says why in its result. Its state (struct
 * unwind_walk) lives in a map between runs: programs walk UNWIND_WALK_FRAMES
 * frames a run and tail-call themselves (cpu.bpf.c, offcpu_switchout.bpf.c),
 * or step one frame per bpf_loop iteration (offcpu.bpf.c).
 *
 * Every program that includes this file has these maps; user space shares
 * them between the programs (internal/unwinder.Tables). The walk itself is
 * in unwind_walk.h; this file is what the runtimes' walkers share with it.
 */
#ifndef BPFPROFILER_UNWIND_H
#define BPFPROFILER_UNWIND_H

#include "common.h"
#include "arch.h"

/* Row kinds (internal/cfi.Kind). */
enum unwind_kind {
	UNWIND_NO_CFI = 0,	/* no CFI for this pc: use the frame pointer */
	UNWIND_CFA = 1,		/* CFA = reg + cfa_offset, return address at CFA-8 */
	UNWIND_PLT = 2,		/* a PLT entry: CFA = rsp + cfa_offset, +8 when (pc & 15) >= fp_offset */
	UNWIND_SIGNAL = 3,	/* a signal trampoline: registers saved in the ucontext at sp (arch.h) */
	UNWIND_STOP = 4,	/* the thread's root: the return address is undefined */
	UNWIND_UNSUPPORTED = 5, /* CFI the table cannot express: the walk stops */
};

/*
 * One row of an unwind table (internal/unwinder writes these): 8 bytes, the
 * least an array element takes. Its rule packs, from bit 0: the kind (3
 * bits, enum unwind_kind), the CFA register (1 bit: set for the frame
 * pointer, clear for the stack pointer), then
 * - x86-64: a signed 8-bit field (CFA rows: where the caller's rbp is
 *   saved, in words from the CFA, 0: not saved; PLT rows: the push's offset
 *   in the entry) and the signed 20-bit CFA offset in bytes;
 * - arm64: where x29 is saved and where x30 (the return address) is saved,
 *   signed 8-bit each, in words from the CFA (0: not saved; x30's return
 *   address is then still in the link register), and the signed 12-bit CFA
 *   offset in 16-byte units; or, when x29's field is ROW_RECORD_AT_BASE,
 *   the frame record (x29, x30) is at the CFA register itself (the bottom
 *   of a large frame), or when it is ROW_LR_AT_BASE x30 alone is, and bits
 *   12-31 hold a signed 20-bit CFA offset.
 * CFA = register + CFA offset.
 */
struct unwind_row {
	u32 pc; /* first pc of the row, from the table's base */
	u32 rule;
};

#define ROW_KIND(rule) ((rule)&7)
#define ROW_CFA_FP(rule) (((rule) >> 3) & 1)
#define ROW_FIELD(rule) ((s32)((rule) << 20) >> 24)
#if defined(__TARGET_ARCH_arm64)
#define ROW_RECORD_AT_BASE (-128)
#define ROW_LR_AT_BASE (-127)
#define ROW_RECORD(rule) (ROW_FIELD(rule) == ROW_RECORD_AT_BASE || ROW_FIELD(rule) == ROW_LR_AT_BASE)
#define ROW_RA_SLOT(rule) ((s32)((rule) << 12) >> 24)
#define ROW_CFA_OFFSET(rule) ((ROW_RECORD(rule) ? (s32)(rule) >> 12 : (s32)(rule) >> 20) * 16)
#else
#define ROW_RECORD_AT_BASE (-128) /* arm64 only */
#define ROW_RECORD(rule) 0
#define ROW_RA_SLOT(rule) (-1) /* the return address is at CFA-8 */
#define ROW_CFA_OFFSET(rule) ((s32)(rule) >> 12)
#endif

/* Key of unwind_mappings: prefixlen bits of (pid, big-endian address) match. */
struct unwind_mapping_key {
	u32 prefixlen;
	u32 pid;  /* as the collector sees it */
	u64 addr; /* big-endian */
};

/* An executable mapping of a process. */
struct unwind_mapping {
	u64 bias;     /* table pc = address - bias */
	u32 table;    /* the file's table: unwind_files[table] */
	u32 rows;     /* its rows; 0: no table, walk with the frame pointer */
	u32 runtime;  /* the process's runtime walked in place (enum runtime_id, runtimes.h); 0: none */
	u32 reserved; /* padding */
};

/* unwind_mapping.table (rows 0) of a file whose table was evicted. */
#define UNWIND_TABLE_EVICTED 0xffffffffu
/* unwind_mapping.table (rows 0) of anonymous executable memory: JIT code. */
#define UNWIND_TABLE_ANON 0xfffffffeu

/*
 * Clang describes the inner maps' value type only as a declaration: this
 * unused constant keeps its layout in BTF, for the loader and bpf2go.
 */
const volatile struct unwind_row unwind_row_layout = {};

/*
 * The loaded tables (slots sized by user space at load): one file's rows
 * each, in an array user space creates with the file's own size.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, u32);
	__array(
		values, struct {
			__uint(type, BPF_MAP_TYPE_ARRAY);
			__uint(max_entries, 1);
			__uint(map_flags, BPF_F_INNER_MAP);
			__type(key, u32);
			__type(value, struct unwind_row);
		});
} unwind_files SEC(".maps");

/*
 * unwind_files slot -> non-zero once a walk used its table since user space
 * last cleared it: tables no walk uses are the first evicted when a new
 * one needs room.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} unwind_table_used SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct unwind_mapping_key);
	__type(value, struct unwind_mapping);
} unwind_mappings SEC(".maps");

/* Bits of unwind_mapping_key after prefixlen. */
#define UNWIND_KEY_BITS 96
/* Binary search steps: tables of up to 2^22 rows. */
#define UNWIND_SEARCH_STEPS 22

struct user_regs {
	u64 ip;
	u64 sp;
	u64 bp; /* the frame pointer: rbp, x29 */
	u64 lr; /* arm64: x30, the link register, while the registers are interrupted ones */
	/*
	 * arm64: sp is a guess, fp + 16, after a frame-pointer step: right
	 * where the callee's frame record is at its top, wrong where more is
	 * above it (callee-saved registers in V8's JSEntry, GCC's frames with
	 * their record at the bottom). unwind_step takes the CFA of a caller
	 * with a frame record of its own from x29 then.
	 */
	u64 sp_guessed;
};

/*
 * Set by user space when it loads the tables of the processes announced:
 * then an address in no mapping of an announced process means its mappings
 * changed since they were read (a library loaded with dlopen, new JIT
 * code), and a rescan is asked (announce.h).
 */
const volatile u8 unwind_tables = 0;

/* Where the current task (task) saved its user registers when it entered the kernel. */
static __always_inline u64 saved_user_regs_base(struct task_struct *task)
{
	if (have_task_pt_regs)
		return bpf_task_pt_regs(bpf_get_current_task_btf());
	return (u64)BPF_CORE_READ(task, stack) + THREAD_SIZE - UREGS_SIZE;
}

/* The user registers the current task saved when it entered the kernel. */
static __always_inline int saved_user_regs(struct task_struct *task, struct user_regs *regs)
{
	u64 base = saved_user_regs_base(task);

	if (!base)
		return -1;
	if (bpf_probe_read_kernel(&regs->ip, sizeof(u64), (void *)(base + UREGS_IP)) ||
	    bpf_probe_read_kernel(&regs->sp, sizeof(u64), (void *)(base + UREGS_SP)) ||
	    bpf_probe_read_kernel(&regs->bp, sizeof(u64), (void *)(base + UREGS_BP)))
		return -1;
	regs->lr = 0;
	regs->sp_guessed = 0;
#if defined(__TARGET_ARCH_arm64)
	if (bpf_probe_read_kernel(&regs->lr, sizeof(u64), (void *)(base + UREGS_LR)))
		return -1;
#endif
	return 0;
}

/*
 * The user registers of the sampled thread: those of the perf event when
 * the sample hit user mode, else those saved at kernel entry.
 */
static __always_inline int sample_user_regs(struct bpf_perf_event_data *ctx, struct task_struct *task,
					    struct user_regs *regs)
{
	const u64 *r = (const u64 *)ctx; /* bpf_perf_event_data starts with pt_regs */

	if (user_mode_regs(r)) {
		regs->ip = r[UREGS_IP / 8];
		regs->sp = r[UREGS_SP / 8];
		regs->bp = r[UREGS_BP / 8];
		regs->lr = 0;
		regs->sp_guessed = 0;
#if defined(__TARGET_ARCH_arm64)
		regs->lr = r[UREGS_LR / 8];
#endif
		return 0;
	}
	return saved_user_regs(task, regs);
}

/* The executable mapping of pid holding addr, if its tables are loaded. */
static __always_inline struct unwind_mapping *find_mapping(u32 pid, u64 addr)
{
	struct unwind_mapping_key key = {
		.prefixlen = UNWIND_KEY_BITS,
		.pid = pid,
		.addr = __builtin_bswap64(addr),
	};

	return bpf_map_lookup_elem(&unwind_mappings, &key);
}

/* The last row of table (count rows) whose pc is at most pc, or NULL. */
static __always_inline struct unwind_row *find_row(u32 table, u32 count, u32 pc)
{
	u32 lo = 0, hi = count; /* the answer is in [lo, hi) */
	struct unwind_row *row;
	void *rows;

	u32 *used;

	rows = bpf_map_lookup_elem(&unwind_files, &table);
	if (!rows)
		return NULL;
	used = bpf_map_lookup_elem(&unwind_table_used, &table);
	if (used && !*used)
		*used = 1;
#pragma clang loop unroll(disable)
	for (int i = 0; i < UNWIND_SEARCH_STEPS; i++) {
		u32 mid;

		if (hi - lo <= 1)
			break;
		mid = lo + (hi - lo) / 2;
		row = bpf_map_lookup_elem(rows, &mid);
		if (!row)
			return NULL;
		if (row->pc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	if (hi - lo != 1)
		return NULL; /* a table longer than UNWIND_SEARCH_STEPS allows */
	row = bpf_map_lookup_elem(rows, &lo);
	if (!row || row->pc > pc)
		return NULL;
	return row;
}

static __always_inline int read_user_u64(u64 *dst, u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

/* A runtime's step (runtimes.h) leaves the frame to the native frame pointer rule. */
#define UNWIND_NATIVE_STEP (-3)

/*
 * The word an in-place walker writes after its frame's pc (internal/capture):
 * the top bit set (no user pc has it), the position above the address bits
 * (IN_PLACE_ADDR_BITS, arch.h: where in the object the frame is, + 1; all
 * ones when unknown; 0 is never written) and the runtime's object (a Method*,
 * a tagged SharedFunctionInfo) in the address bits. The objects' alignment
 * and tags tell the runtimes' words apart.
 */
#define IN_PLACE_ADDR_MASK ((1ULL << IN_PLACE_ADDR_BITS) - 1)
#define IN_PLACE_POSITION_UNKNOWN ((1U << (63 - IN_PLACE_ADDR_BITS)) - 1)
#define IN_PLACE_WORD(object, position) \
	((1ULL << 63) | ((u64)(position) << IN_PLACE_ADDR_BITS) | ((object)&IN_PLACE_ADDR_MASK))

#endif /* BPFPROFILER_UNWIND_H */
