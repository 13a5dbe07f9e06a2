/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * USDT probe arguments: what a probe's `attributes` name, fetched at the
 * outermost entry of its scope from the registers at the probe site, as
 * the site's note says (internal/usdt reads the specs; user space writes
 * one usdt_args_spec per distinct set of a site's arguments, and the
 * entry uprobe's attach cookie carries its index + 1, see probe_entry).
 * An argument is a constant, a register (at an offset in struct pt_regs)
 * or memory at a register plus an offset, of 1, 2, 4 or 8 bytes, sign- or
 * zero-extended; a string argument is the NUL-terminated string at the
 * argument's value, at most USDT_STR_BYTES bytes with its NUL.
 */
#ifndef BPFPROFILER_USDTARGS_H
#define BPFPROFILER_USDTARGS_H

#include "common.h"

#define USDT_MAX_ARGS 4
#define USDT_STR_BYTES 128
#define MAX_USDT_SPECS 1024
/* Past the largest register offset of either architecture's pt_regs (arm64 sp: 31 * 8). */
#define USDT_REG_OFF_MAX (33 * 8)

enum usdt_arg_kind {
	USDT_ARG_NONE = 0,
	USDT_ARG_CONST = 1,
	USDT_ARG_REG = 2,
	USDT_ARG_MEM = 3,
};

/* How to fetch one argument (internal/usdt.Arg). */
struct usdt_arg_spec {
	s64 value;   /* USDT_ARG_CONST: the value; USDT_ARG_MEM: the offset added to the register */
	u16 reg_off; /* the register's offset in struct pt_regs */
	u8 kind;     /* enum usdt_arg_kind */
	u8 size;     /* 1, 2, 4 or 8 bytes */
	u8 is_signed;
	u8 string; /* read the NUL-terminated string at the value */
	u8 pad[2];
};

/* The arguments a probe's attributes name at one site, in the attributes' order. */
struct usdt_args_spec {
	struct usdt_arg_spec args[USDT_MAX_ARGS];
};

/* The fetched arguments of a scope, sent after its record (probe_record.args). */
struct probe_args {
	u64 values[USDT_MAX_ARGS]; /* integers, sign- or zero-extended; a string's: its length with the NUL */
	u32 failed;		   /* bit i: argument i could not be read */
	u32 reserved;		   /* explicit padding, always 0 */
	u8 strs[USDT_MAX_ARGS][USDT_STR_BYTES];
};

/* A thread's open scope's arguments, fetched when it opened at start_ns. */
struct scope_args {
	u64 start_ns;
	struct probe_args args;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_USDT_SPECS);
	__type(key, u32);
	__type(value, struct usdt_args_spec);
} usdt_specs SEC(".maps");

/* Per-CPU buffer the arguments are fetched into (too large for the BPF stack). */
#ifndef USDT_NO_SCOPE_ARGS /* a program family fetching into buffers of its own */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct scope_args);
} args_scratch SEC(".maps");
#endif

/* Sign- or zero-extends the low size bytes of v. */
static __always_inline u64 usdt_extend(u64 v, const struct usdt_arg_spec *a)
{
	u32 shift = (64 - 8 * (u32)a->size) & 63;

	if (a->is_signed)
		return (u64)((s64)(v << shift) >> shift);
	return (v << shift) >> shift;
}

/* Reads size (1, 2, 4, 8) bytes at user address addr into the low bytes of *v (little-endian). */
static __always_inline long usdt_read_user(u64 *v, u8 size, u64 addr)
{
	switch (size) {
	case 1:
		return bpf_probe_read_user(v, 1, (const void *)addr);
	case 2:
		return bpf_probe_read_user(v, 2, (const void *)addr);
	case 4:
		return bpf_probe_read_user(v, 4, (const void *)addr);
	default:
		return bpf_probe_read_user(v, 8, (const void *)addr);
	}
}

/* Fetches argument a into out's slot i; non-zero when it cannot be read. */
static __always_inline int usdt_fetch_arg(struct pt_regs *ctx, const struct usdt_arg_spec *a, struct probe_args *out,
					  u32 i)
{
	u64 v = 0, reg = 0;
	long n;

	if (i >= USDT_MAX_ARGS)
		return 1;
	switch (a->kind) {
	case USDT_ARG_CONST:
		v = (u64)a->value;
		break;
	case USDT_ARG_REG:
	case USDT_ARG_MEM:
		if (a->reg_off >= USDT_REG_OFF_MAX ||
		    bpf_probe_read_kernel(&reg, sizeof(reg), (void *)ctx + a->reg_off))
			return 1;
		if (a->kind == USDT_ARG_REG) {
			v = reg;
			break;
		}
		if (usdt_read_user(&v, a->size, reg + (u64)a->value))
			return 1;
		break;
	default:
		return 1;
	}
	v = usdt_extend(v, a);
	if (!a->string) {
		out->values[i] = v;
		return 0;
	}
	n = bpf_probe_read_user_str(out->strs[i], USDT_STR_BYTES, (const void *)v);
	if (n <= 0)
		return 1;
	out->values[i] = (u64)n;
	return 0;
}

#ifndef USDT_NO_SCOPE_ARGS
/*
 * Fetches the arguments spec (index into usdt_specs) names into this CPU's
 * args_scratch, for the scope opened at start; NULL when there is no such
 * spec.
 */
static __always_inline struct scope_args *usdt_fetch_args(struct pt_regs *ctx, u32 spec, u64 start)
{
	struct usdt_args_spec *s;
	struct scope_args *sa;
	u32 zero = 0;

	s = bpf_map_lookup_elem(&usdt_specs, &spec);
	sa = bpf_map_lookup_elem(&args_scratch, &zero);
	if (!s || !sa)
		return NULL;
	sa->start_ns = start;
	sa->args.failed = 0;
	sa->args.reserved = 0;
	for (u32 i = 0; i < USDT_MAX_ARGS; i++) {
		sa->args.values[i] = 0;
		sa->args.strs[i][0] = 0;
		if (s->args[i].kind == USDT_ARG_NONE)
			continue;
		if (usdt_fetch_arg(ctx, &s->args[i], &sa->args, i))
			sa->args.failed |= 1u << i;
	}
	return sa;
}
#endif

#endif /* BPFPROFILER_USDTARGS_H */
