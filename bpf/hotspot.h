/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * HotSpot's Java frames, walked in place between the native frames
 * (runtimes.h hands hotspot_step the frame-pointer frames of a JVM);
 * x86-64 and arm64, whose frames HotSpot lays out alike (a frame record of
 * the saved frame pointer, rbp or x29, and the return address at its
 * top). The JVM keeps no frame pointer in compiled code, so:
 * - a pc in the template interpreter's code is an interpreted frame: rbp is
 *   its frame pointer (saved rbp at [rbp], return address at [rbp+8]) and
 *   the caller's stack pointer is saved in the frame (sender_sp words from
 *   rbp: a compiled caller's sp before an adapter extended it), as are its
 *   Method* and bytecode pointer. The walk writes a runtime word after the
 *   frame's pc (HOTSPOT_FRAME_WORD): user space names the frame's method;
 * - any other pc of the code cache is in a code blob, found through its
 *   heap's segment map (a byte per segment: how many segments back the
 *   blob's block starts, 0 at its first, 0xff for no block); a blob with a
 *   frame size (compiled methods, native wrappers, runtime stubs) is
 *   unwound as HotSpot does: the caller's sp is sp + frame_size words, the
 *   return address the word below it, the caller's rbp the one below that;
 * - blobs without one (the call stub, most stubs) keep rbp as a frame
 *   pointer: the native walk's frame pointer rule; but a leaf in a stub
 *   with no frame at all (vtable stubs, adapters) has its return address
 *   at sp on x86-64, which a code address there tells, and in x30 on
 *   arm64, unless the stub saved x30 in a frame record of its own.
 * User space (internal/runtimes/hotspot) fills hotspot_procs once a JVM's
 * code cache exists; the offsets are read from the JVM's own VMStructs.
 */
#ifndef BPFPROFILER_HOTSPOT_H
#define BPFPROFILER_HOTSPOT_H

#include "unwind.h"

#define HOTSPOT_MAX_HEAPS 4
/* Segment map hops back to a block's start: each goes back up to 254
 * segments (16 KiB of 64-byte segments), HotSpot keeps chains short. */
#define HOTSPOT_SEGMAP_HOPS 32
#define HOTSPOT_SEGMAP_FREE 0xff
/* Frame sizes beyond this (words) are not a frame: the walk stops. */
#define HOTSPOT_MAX_FRAME_WORDS 65536
/* hotspot_step: not a Java frame, walk it with the frame pointer. */
#define HOTSPOT_FRAME_POINTER UNWIND_NATIVE_STEP

/*
 * The word written after an interpreted frame's pc (unwind.h IN_PLACE_WORD):
 * its Method*, aligned, and the bytecode index + 1.
 */
#define HOTSPOT_FRAME_WORD(method, position) IN_PLACE_WORD(method, position)
#define HOTSPOT_BCI_UNKNOWN IN_PLACE_POSITION_UNKNOWN

/* One code heap: its reserved code [low, high) and its segment map. */
struct hotspot_heap {
	u64 low;
	u64 high;
	u64 segmap;
	u32 log2_segment;
	u32 reserved;
};

/* What the walk needs of one JVM process (hotspot.walkerProc). */
struct hotspot_proc {
	struct hotspot_heap heaps[HOTSPOT_MAX_HEAPS];
	u64 interp_low, interp_high; /* the template interpreter's code */
	u32 heaps_n;
	u16 block_header;	 /* sizeof(HeapBlock): the blob follows it */
	u16 blob_frame_size;	 /* CodeBlob::_frame_size (int, words) */
	u16 blob_frame_complete; /* CodeBlob::_frame_complete_offset */
	u16 blob_code;		 /* CodeBlob::_code_offset (int) or _code_begin (address) */
	s16 interp_sender_sp;	 /* words from an interpreted frame's rbp: */
	s16 interp_method;	 /* its Method* */
	s16 interp_bcp;		 /* its bytecode pointer */
	u16 method_const;	 /* Method::_constMethod */
	u16 const_method_size;	 /* sizeof(ConstMethod): the bytecodes follow it */
	u8 frame_complete_16;	 /* _frame_complete_offset is an int16 (JDK 23 on) */
	u8 code_is_offset;	 /* blob_code is _code_offset */
};

/* pid (as the collector sees it) -> its JVM. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct hotspot_proc);
} hotspot_procs SEC(".maps");

/*
 * The return address and the caller's sp of a frame interrupted before it
 * is built (or of a stub that builds none): at sp on x86-64; in the link
 * register on arm64, whose sp is then still the caller's.
 */
static __always_inline int hotspot_entry_return(const struct user_regs *regs, u64 *ra, u64 *sp)
{
#if defined(__TARGET_ARCH_arm64)
	*ra = regs->lr;
	*sp = regs->sp;
	return 0;
#else
	*sp = regs->sp + 8;
	return read_user_u64(ra, regs->sp);
#endif
}

/* The first byte of the block holding segment seg of h: its blob follows. */
static __always_inline int hotspot_block(const struct hotspot_heap *h, u64 *seg)
{
	u8 hop = HOTSPOT_SEGMAP_FREE;

#pragma clang loop unroll(disable)
	for (int i = 0; i < HOTSPOT_SEGMAP_HOPS; i++) {
		if (bpf_probe_read_user(&hop, 1, (const void *)(h->segmap + *seg)))
			return UNWIND_END_READ_FAULT;
		if (hop == HOTSPOT_SEGMAP_FREE)
			return HOTSPOT_FRAME_POINTER; /* in no block */
		if (hop == 0)
			return 0;
		if (hop > *seg)
			return UNWIND_END_BAD_FRAME;
		*seg -= hop;
	}
	return UNWIND_END_BAD_FRAME;
}

/*
 * One frame up from regs when pc (the looked-up pc: the call for a return
 * address) is Java code of pid's JVM: sets regs to the caller's and returns
 * -1, or an enum unwind_end; HOTSPOT_FRAME_POINTER when pc is not a Java
 * frame of a JVM (or not one the walk knows: a frame pointer frame). For an
 * interpreted frame *word is its HOTSPOT_FRAME_WORD, else left alone.
 */
static __always_inline int hotspot_step(struct user_regs *regs, u32 pid, int first, u64 pc, u64 *word)
{
	const struct hotspot_proc *p = bpf_map_lookup_elem(&hotspot_procs, &pid);
	const struct hotspot_heap *h = NULL;
	u64 seg, blob, code = 0, cfa, ra, fp, sp;
	s32 frame_size = 0, complete = 0;
	int r;

	if (!p)
		return HOTSPOT_FRAME_POINTER;
	if (pc >= p->interp_low && pc < p->interp_high) {
		u64 method = 0, bcp = 0, cm = 0, bci = HOTSPOT_BCI_UNKNOWN;

		fp = regs->bp;
		if (!fp)
			return UNWIND_END_BAD_FRAME;
		if (read_user_u64(&method, fp + (s64)p->interp_method * 8) ||
		    read_user_u64(&bcp, fp + (s64)p->interp_bcp * 8))
			return UNWIND_END_READ_FAULT;
		if (method && !read_user_u64(&cm, method + p->method_const) && bcp >= cm + p->const_method_size &&
		    bcp - cm - p->const_method_size < HOTSPOT_BCI_UNKNOWN - 1)
			bci = bcp - cm - p->const_method_size + 1;
		*word = HOTSPOT_FRAME_WORD(method, bci);
		if (read_user_u64(&ra, fp + 8) || read_user_u64(&sp, fp + (s64)p->interp_sender_sp * 8) ||
		    read_user_u64(&fp, fp))
			return UNWIND_END_READ_FAULT;
		if (sp <= regs->sp)
			return UNWIND_END_BAD_FRAME;
		goto done;
	}
#pragma unroll
	for (int i = 0; i < HOTSPOT_MAX_HEAPS; i++) {
		if (i < p->heaps_n && pc >= p->heaps[i].low && pc < p->heaps[i].high) {
			h = &p->heaps[i];
			break;
		}
	}
	if (!h)
		return HOTSPOT_FRAME_POINTER;
	seg = (pc - h->low) >> (h->log2_segment & 31);
	r = hotspot_block(h, &seg);
	if (r)
		return r;
	blob = h->low + (seg << (h->log2_segment & 31)) + p->block_header;
	if (bpf_probe_read_user(&frame_size, sizeof(frame_size), (const void *)(blob + p->blob_frame_size)))
		return UNWIND_END_READ_FAULT;
	if (frame_size <= 0) {
		/* Interrupted in a stub with no frame of its own (vtable and
		 * itable stubs, adapters): its caller's return address is at sp,
		 * where a stub with a frame has saved rbp (a stack address); on
		 * arm64 in x30, which a stub with a frame has saved at x29 + 8. */
		if (!first || hotspot_entry_return(regs, &ra, &sp) || !find_mapping(pid, RETURN_ADDRESS(ra) - 1))
			return HOTSPOT_FRAME_POINTER;
#if defined(__TARGET_ARCH_arm64)
		if (!read_user_u64(&fp, regs->bp + 8) && fp == ra)
			return HOTSPOT_FRAME_POINTER;
#endif
		fp = regs->bp;
		goto done;
	}
	if (frame_size > HOTSPOT_MAX_FRAME_WORDS)
		return UNWIND_END_BAD_FRAME;
	if (first) {
		/* Interrupted before its frame is built: the return address is still at sp. */
		if (bpf_probe_read_user(&complete, sizeof(complete), (const void *)(blob + p->blob_frame_complete)))
			return UNWIND_END_READ_FAULT;
		if (p->frame_complete_16)
			complete = (s16)complete;
		if (p->code_is_offset) {
			s32 off = 0;

			if (bpf_probe_read_user(&off, sizeof(off), (const void *)(blob + p->blob_code)))
				return UNWIND_END_READ_FAULT;
			code = blob + off;
		} else if (read_user_u64(&code, blob + p->blob_code)) {
			return UNWIND_END_READ_FAULT;
		}
		if (complete > 0 && pc >= code && pc < code + complete) {
			if (hotspot_entry_return(regs, &ra, &sp))
				return UNWIND_END_READ_FAULT;
			fp = regs->bp;
			goto done;
		}
	}
	cfa = regs->sp + (u64)frame_size * 8;
	if (read_user_u64(&ra, cfa - 8) || read_user_u64(&fp, cfa - 16))
		return UNWIND_END_READ_FAULT;
	sp = cfa;
done:
	ra = RETURN_ADDRESS(ra);
	if (!ra)
		return UNWIND_END_ROOT;
	regs->ip = ra;
	regs->sp = sp;
	regs->bp = fp;
	regs->lr = 0;
	regs->sp_guessed = 0;
	return -1;
}

#endif /* BPFPROFILER_HOTSPOT_H */
