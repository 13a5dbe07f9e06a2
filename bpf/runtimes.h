/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The runtimes whose walkers read frames in place, during the native walk
 * (unwind_walk.h), and the one dispatch that enters them. User space puts
 * the id of a process's in-place runtime on each of its executable mappings
 * (unwind_mapping.runtime: internal/runtimes Runtime.ID, where Runtime.InPlace); the walk
 * hands every frame-pointer frame of such a mapping to runtime_step. A
 * runtime adds its walker header and an entry here: a step that, for a pc
 * of its code, either steps out of the frame itself (sets regs to the
 * caller's and returns -1, or an enum unwind_end), or returns
 * UNWIND_NATIVE_STEP for the frame pointer rule; either may set *word, an
 * IN_PLACE_WORD naming what the frame runs.
 */
#ifndef BPFPROFILER_RUNTIMES_H
#define BPFPROFILER_RUNTIMES_H

#include "unwind.h"
#include "hotspot.h"
#include "v8.h"

/* Unused: keeps the enum in BTF, for bpf2go (Go's CpuRuntimeId). */
const volatile enum runtime_id runtime_ids = RUNTIME_NONE;

/*
 * One frame of runtime's code at regs (pc: the looked-up pc, the call for a
 * return address; first: regs are the interrupted ones), as the runtime's
 * walker steps it; UNWIND_NATIVE_STEP for the native frame pointer rule.
 */
static __always_inline int runtime_step(u32 runtime, struct user_regs *regs, u32 pid, int first, u64 pc, u64 *word)
{
	switch (runtime) {
	case RUNTIME_HOTSPOT:
		return hotspot_step(regs, pid, first, pc, word);
	case RUNTIME_V8:
		return v8_step(regs, pid, word);
	}
	return UNWIND_NATIVE_STEP;
}

#endif /* BPFPROFILER_RUNTIMES_H */
