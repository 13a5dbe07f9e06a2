/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * V8's JavaScript frames (node), read in place between the native frames;
 * x86-64 and arm64, whose frames V8 lays out alike. V8 keeps a frame pointer in every frame of its JIT code and of
 * its embedded builtins, so the native walk's frame pointer rule walks
 * them; this file only tells what each such frame runs. runtimes.h asks
 * v8_step for every frame of a node process walked by its frame
 * pointer: JIT code (Sparkplug, Maglev, TurboFan) in anonymous memory, and
 * the embedded builtins (the interpreter: Ignition's trampoline and
 * bytecode handlers), which have no CFI and which V8 12 on runs from a
 * second mapping of the node binary inside its code range (for short
 * calls), so no address range tells them. The frame at fp holds, below its saved
 * fp, its context or, for a typed frame (stubs, exits, entries), a Smi
 * marker; a JavaScript frame holds its JSFunction next, and an interpreted
 * one its BytecodeArray and bytecode offset (a Smi) below that. The word
 * written after the frame's pc (V8_FRAME_WORD) carries the function's
 * SharedFunctionInfo, checked by its map's instance type, and for an
 * interpreted frame the bytecode offset; internal/runtimes/v8 names it.
 * Offsets come from the node binary's own post-mortem metadata (v8dbg_*).
 * Node's V8 has no pointer compression: a Smi is its value << 32, a
 * heap object pointer is its address + 1.
 */
#ifndef BPFPROFILER_V8_H
#define BPFPROFILER_V8_H

#include "unwind.h"

#define V8_HEAP_OBJECT_TAG 1
/* Positions: 0 for compiled code, else the bytecode offset + 1; offsets at
 * or beyond V8_POSITION_UNKNOWN - 1 are not told. */
#define V8_POSITION_UNKNOWN IN_PLACE_POSITION_UNKNOWN

/*
 * The word written after a JavaScript frame's pc (unwind.h IN_PLACE_WORD):
 * its SharedFunctionInfo, tagged, whose tag bit (bit 0) tells it from
 * HotSpot's word, whose Method* is aligned.
 */
#define V8_FRAME_WORD(sfi, position) IN_PLACE_WORD(sfi, position)

/* What the walk needs of one node process (internal/runtimes/v8.walkerProc). */
struct v8_proc {
	s16 fp_marker;		       /* from fp: context, or a typed frame's Smi marker */
	s16 fp_function;	       /* the JSFunction */
	s16 fp_bytecode_array;	       /* an interpreted frame's BytecodeArray */
	s16 fp_bytecode_offset;	       /* its bytecode offset (Smi: offset + header - tag) */
	u16 function_shared;	       /* JSFunction::shared */
	u16 map_instance_type;	       /* Map::instance_type (u16) */
	u16 bytecode_header;	       /* BytecodeArray's header size: its bytecodes' offset */
	u16 type_shared_function_info; /* SHARED_FUNCTION_INFO_TYPE */
	u16 type_bytecode_array;       /* BYTECODE_ARRAY_TYPE */
	u16 reserved;
};

/* pid (as the collector sees it) -> its V8. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct v8_proc);
} v8_procs SEC(".maps");

/* The instance type of the heap object at tagged pointer obj; 0 when it is not one. */
static __always_inline u16 v8_instance_type(const struct v8_proc *p, u64 obj)
{
	u64 map = 0;
	u16 type = 0;

	if ((obj & 3) != V8_HEAP_OBJECT_TAG || read_user_u64(&map, obj - V8_HEAP_OBJECT_TAG) ||
	    (map & 3) != V8_HEAP_OBJECT_TAG ||
	    bpf_probe_read_user(&type, sizeof(type), (const void *)(map - V8_HEAP_OBJECT_TAG + p->map_instance_type)))
		return 0;
	return type;
}

/*
 * The V8_FRAME_WORD of the frame at fp of pid, when it is a JavaScript frame
 * of a node process; 0 otherwise (the frame stays a native one).
 */
static __always_inline u64 v8_frame_word(u32 pid, u64 fp)
{
	const struct v8_proc *p = bpf_map_lookup_elem(&v8_procs, &pid);
	u64 marker = 0, fn = 0, sfi = 0, bytecodes = 0, offset = 0;
	u64 position = 0;
	s64 smi;

	if (!p || !fp)
		return 0;
	/* A typed frame's marker is a Smi: no function there. */
	if (read_user_u64(&marker, fp + p->fp_marker) || (marker & 1) != V8_HEAP_OBJECT_TAG)
		return 0;
	if (read_user_u64(&fn, fp + p->fp_function) || (fn & 3) != V8_HEAP_OBJECT_TAG ||
	    read_user_u64(&sfi, fn - V8_HEAP_OBJECT_TAG + p->function_shared))
		return 0;
	if (v8_instance_type(p, sfi) != p->type_shared_function_info)
		return 0;
	/* An interpreted frame: a BytecodeArray and a Smi offset. Sparkplug's
	 * frames keep the feedback vector in the offset's slot: compiled. */
	if (!read_user_u64(&bytecodes, fp + p->fp_bytecode_array) &&
	    !read_user_u64(&offset, fp + p->fp_bytecode_offset) && (offset & 0xffffffffULL) == 0 &&
	    v8_instance_type(p, bytecodes) == p->type_bytecode_array) {
		smi = (s64)offset >> 32;
		smi -= (s64)p->bytecode_header - V8_HEAP_OBJECT_TAG;
		position = smi >= 0 && smi < V8_POSITION_UNKNOWN - 1 ? smi + 1 : V8_POSITION_UNKNOWN;
	}
	return V8_FRAME_WORD(sfi, position);
}

/* A frame of a node process walked by its frame pointer: its word, if it is JavaScript's. */
static __always_inline int v8_step(const struct user_regs *regs, u32 pid, u64 *word)
{
	*word = v8_frame_word(pid, regs->bp);
	return UNWIND_NATIVE_STEP;
}

#endif /* BPFPROFILER_V8_H */
