/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * PHP frames of the current thread, read from the Zend engine's own
 * structures: the walker of the PHP runtime (internal/runtimes/php).
 *
 * User space fills php_procs[pid] with the address of the process's
 * executor_globals, the range of execute_ex (the VM) and the offsets of its
 * version (php.Interpreter.WalkerProc). The walk is php.Layout.Walk, read
 * for read: from EG(current_execute_data) along prev_execute_data, one word
 * per frame, leaf first: the zend_function's address, the op the frame is
 * at and a flag on the frame an execute_ex call was entered with.
 *
 * The innermost frame's opline in memory is where its handlers last saved
 * it: the hybrid VM keeps the current one in a register (r15 on x86-64, x28
 * on arm64). When the sampled pc is in execute_ex, that register is it.
 */
#ifndef BPFPROFILER_PHP_H
#define BPFPROFILER_PHP_H

#include "common.h"

/*
 * A PHP frame word: zend_function address | op index << 48 | entry << 63.
 * The index is clamped to PHP_FRAME_POS_MAX; PHP_FRAME_POS_NONE is no op
 * (an internal function, or an opline not among the function's ops).
 *
 * A file's or an eval's top code ({main}, an include) has the address of
 * its file name (a zend_string) | PHP_FRAME_CODE instead, and the op's line
 * for index: its op_array is the request's own (opcache copies it into
 * each request), freed when the request ends, often before user space
 * names the sample; the file name lives on (interned).
 */
#define PHP_FRAME_ADDR_BITS 48
#define PHP_FRAME_ADDR_MASK ((1ULL << PHP_FRAME_ADDR_BITS) - 1)
#define PHP_FRAME_POS_NONE 0x7fffULL
#define PHP_FRAME_POS_MAX 0x7ffeULL
#define PHP_FRAME_ENTRY (1ULL << 63)
#define PHP_FRAME_CODE 1ULL /* zend_strings are 8-aligned */

/* zend_function.type of user code; ZEND_CALL_CODE, ZEND_CALL_TOP in the call info. */
#define PHP_USER_FUNCTION 2
#define PHP_EVAL_CODE 4
#define PHP_CALL_CODE (1U << 16)
#define PHP_CALL_TOP (1U << 17)

/* What is read of a zend_execute_data: its fields up to prev_execute_data. */
#define PHP_EXECUTE_DATA_SIZE 56

/* The VM's opline register in a struct pt_regs / user_pt_regs. */
#if defined(__TARGET_ARCH_x86)
#define PHP_UREGS_OPLINE 0 /* r15 */
#else
#define PHP_UREGS_OPLINE (28 * 8) /* x28 */
#endif

/* One PHP process (php.walkerProc). */
struct php_proc {
	u64 executor_globals; /* address of executor_globals */
	u64 execute_ex_start; /* [start, end): execute_ex; 0, 0: unknown */
	u64 execute_ex_end;
	u32 current_execute_data;
	u32 execute_data_opline; /* offsets in the first PHP_EXECUTE_DATA_SIZE bytes */
	u32 execute_data_func;
	u32 execute_data_call_info;
	u32 execute_data_prev;
	u32 function_type;
	u32 op_array_last;
	u32 op_array_opcodes;
	u32 op_size;
	u32 op_array_filename;
	u32 op_lineno;
	u32 reserved;
};

/* pid (as the collector sees it) -> its engine. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct php_proc);
} php_procs SEC(".maps");

/*
 * A walk's state, in a per-CPU map: off the samplers' stack, and ed (the
 * execute_data read) is read at variable offsets, which 5.10's verifier
 * allows in a map value, not on the stack. Fields are taken at their
 * offset masked to 63, which stays in ed.
 */
struct php_walk_state {
	u64 ex;	    /* the execute_data to read next */
	u64 opline; /* the innermost frame's, when vm_opline */
	u32 count;
	s32 end; /* enum runtime_end */
	u8 vm_opline;
	u8 pad[7]; /* explicit padding */
	u64 ed[9]; /* 64 + 8 bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct php_walk_state);
} php_walks SEC(".maps");

static __always_inline int php_read(void *dst, u32 size, u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

/*
 * A field of the execute_data read, at offset off (masked: it stays in ed).
 * ed is a parameter so that the load is one (ed is 8-aligned; an offset
 * that is not is read unaligned, which both architectures allow).
 */
static __always_inline u64 php_ed_u64(const void *ed, u32 off)
{
	return *(const u64 *)(ed + (off & 63));
}

static __always_inline u32 php_ed_u32(const void *ed, u32 off)
{
	return *(const u32 *)(ed + (off & 63));
}

/* The op index of opline among the last ops at opcodes, or PHP_FRAME_POS_NONE. */
static __always_inline u64 php_position(const struct php_proc *p, u64 opline, u64 opcodes, u32 last)
{
	u64 diff = opline - opcodes, i;

	i = diff / p->op_size;
	/* One branch: opline is an op of the function (diff is its offset). */
	if (opline < opcodes || i * p->op_size != diff || i >= last)
		return PHP_FRAME_POS_NONE;
	return i > PHP_FRAME_POS_MAX ? PHP_FRAME_POS_MAX : i;
}

/*
 * The word (*word) and line of top code at opline, whose op index is pos:
 * the file name's address | PHP_FRAME_CODE, and the op's line clamped to
 * PHP_FRAME_POS_MAX (PHP_FRAME_POS_NONE: opline is not one of its ops or
 * unreadable).
 */
static __always_inline u64 php_code(const struct php_proc *p, u64 fn, u64 opline, u64 pos, u64 *word)
{
	u64 file = 0;
	u32 line = 0;

	if (php_read(&file, sizeof(file), fn + p->op_array_filename) || !file)
		return pos;
	*word = (file & PHP_FRAME_ADDR_MASK) | PHP_FRAME_CODE;
	if (pos == PHP_FRAME_POS_NONE || php_read(&line, sizeof(line), opline + p->op_lineno))
		return PHP_FRAME_POS_NONE;
	return line > PHP_FRAME_POS_MAX ? PHP_FRAME_POS_MAX : line;
}

/*
 * One frame: writes the word of w->ex and moves w->ex to the previous one.
 * Returns non-zero when the walk ends (w->end says why).
 */
static __always_inline int php_step(const struct php_proc *p, struct php_walk_state *w, u64 *frames)
{
	u64 opline, fn, opcodes = 0, word, pos = PHP_FRAME_POS_NONE;
	u32 count = w->count, call_info, last = 0;
	u8 type = 0;

	if (!w->ex) {
		w->end = RUNTIME_END_ROOT;
		return 1;
	}
	if (count >= MAX_STACK_DEPTH)
		return 1;
	if (php_read(w->ed, PHP_EXECUTE_DATA_SIZE, w->ex))
		goto fault;
	opline = php_ed_u64(w->ed, p->execute_data_opline);
	fn = php_ed_u64(w->ed, p->execute_data_func);
	call_info = php_ed_u32(w->ed, p->execute_data_call_info);
	w->ex = php_ed_u64(w->ed, p->execute_data_prev);
	if (w->vm_opline) {
		opline = w->opline;
		w->vm_opline = 0;
	}
	if (php_read(&type, sizeof(type), fn + p->function_type))
		goto fault;
	word = fn & PHP_FRAME_ADDR_MASK;
	if (type == PHP_USER_FUNCTION || type == PHP_EVAL_CODE) {
		if (php_read(&last, sizeof(last), fn + p->op_array_last) ||
		    php_read(&opcodes, sizeof(opcodes), fn + p->op_array_opcodes))
			goto fault;
		pos = php_position(p, opline, opcodes, last);
		if (call_info & PHP_CALL_CODE)
			pos = php_code(p, fn, opline, pos, &word);
		if (call_info & PHP_CALL_TOP)
			word |= PHP_FRAME_ENTRY;
	}
	word |= pos << PHP_FRAME_ADDR_BITS;
	/* 5.10's verifier loses the bound of a 32-bit value spilled to the stack. */
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
 * Writes the PHP frames of the current thread of process p to frames
 * (MAX_STACK_DEPTH words, zero-terminated when fewer) and returns why the
 * walk ended (enum runtime_end); *n is the number written. pc and vm_reg
 * are the sampled thread's user pc and opline register.
 */
static __always_inline int php_walk(const struct php_proc *p, u64 pc, u64 vm_reg, u64 *frames, u32 *n)
{
	struct php_walk_state *w;
	u32 zero = 0, count;

	*n = 0;
	frames[0] = 0;
	w = bpf_map_lookup_elem(&php_walks, &zero);
	if (!w)
		return RUNTIME_END_READ_FAULT;
	if (php_read(&w->ex, sizeof(w->ex), p->executor_globals + p->current_execute_data))
		return RUNTIME_END_READ_FAULT;
	if (!w->ex)
		return RUNTIME_END_NO_THREAD;
	w->count = 0;
	w->end = RUNTIME_END_DEPTH;
	w->opline = vm_reg;
	w->vm_opline = pc >= p->execute_ex_start && pc < p->execute_ex_end;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_STACK_DEPTH + 1; i++) {
		if (php_step(p, w, frames))
			break;
	}
	count = w->count;
	if (count < MAX_STACK_DEPTH)
		frames[count] = 0;
	*n = count;
	return w->end;
}

#endif /* BPFPROFILER_PHP_H */
