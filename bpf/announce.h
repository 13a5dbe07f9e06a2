/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * New-process announcements, shared by the CPU and off-CPU programs: the
 * first record of a user process (host tgid not in seen_pids) sends its pid,
 * as the collector sees it, through the new_pids ring buffer, so user space
 * can read its mappings while it still runs. forget_process forgets the tgid
 * once the whole thread group is exiting, so a reused pid is announced again.
 * forget_exec forgets it when the process execs a new program, and sends its
 * pid with ANNOUNCE_EXEC set, so user space drops what it read of the old
 * program (mappings, identity); the next record announces the new one.
 */
#ifndef BPFPROFILER_ANNOUNCE_H
#define BPFPROFILER_ANNOUNCE_H

#include "common.h"
#include "drainmaps.h"
#include <bpf/bpf_tracing.h>

#define MAX_SEEN_PIDS 16384
#define NEW_PIDS_BYTES (16 * 1024)
/* Set in a new_pids entry: the process exec'ed (pids are below 2^22). */
#define ANNOUNCE_EXEC 0x80000000u

/* Host tgids already announced in new_pids. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SEEN_PIDS);
	__type(key, u32);
	__type(value, u8);
} seen_pids SEC(".maps");

/* Pids (u32, as the collector sees them) of newly recorded processes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, NEW_PIDS_BYTES);
} new_pids SEC(".maps");

/*
 * Announces a process on its first record: inserts its host tgid in
 * seen_pids and sends pid (as the collector sees it) to new_pids. When the
 * ring buffer is full the drop is counted and the tgid forgotten again, so
 * a later record retries. Kernel threads have nothing to symbolize, and
 * exiting threads announce nothing: their group may already have been
 * forgotten by forget_process, and must stay so.
 */
static __always_inline void announce(u32 host_tgid, u32 pid, unsigned int task_flags, struct sampler_stats *st)
{
	u8 one = 1;
	u32 *rec;

	if (task_flags & (PF_KTHREAD | PF_EXITING))
		return;
	if (bpf_map_lookup_elem(&seen_pids, &host_tgid))
		return;
	/* Another CPU inserted it first: it announces. */
	if (bpf_map_update_elem(&seen_pids, &host_tgid, &one, BPF_NOEXIST))
		return;
	rec = bpf_ringbuf_reserve(&new_pids, sizeof(*rec), 0);
	if (!rec) {
		st->new_pid_drops++;
		bpf_map_delete_elem(&seen_pids, &host_tgid);
		return;
	}
	*rec = pid;
	/*
	 * New processes are rare next to records: wake the reader at once, so
	 * it reads the process's maps while it still runs, and it needs no
	 * polling when the host is idle.
	 */
	bpf_ringbuf_submit(rec, 0);
}

/*
 * A thread exits: once no thread of its group is left running (signal->live,
 * decremented before this tracepoint, reached 0), its tgid is forgotten, so
 * the process that reuses the pid is announced. Waiting for the last thread,
 * not the leader, matters: a leader may exit before its threads, and other
 * threads run (and are recorded) until they handle exit_group's kill. Every
 * thread is marked PF_EXITING before it decrements live, so no record can
 * insert the tgid again after this.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_process, struct task_struct *p)
{
	u32 tgid = p->tgid;

	if (BPF_CORE_READ(p, signal, live.counter) == 0)
		bpf_map_delete_elem(&seen_pids, &tgid);
	return 0;
}

/*
 * A process execs: if it was announced, forget it and tell user space, which
 * drops what it read of the old program. Processes never recorded cost a
 * failed delete. A full ring buffer is counted in new_pid_drops of the
 * current generation, inside the inflight protocol (see cpu.bpf.c).
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(forget_exec, struct task_struct *p)
{
	struct sampler_config *cfg;
	u32 tgid = p->tgid, zero = 0, pid, tid;
	u32 *rec;

	if (bpf_map_delete_elem(&seen_pids, &tgid))
		return 0;
	cfg = bpf_map_lookup_elem(&config, &zero);
	/* p is current: its ids as the collector sees them. */
	if (!cfg || current_ids(cfg, &pid, &tid))
		return 0;
	rec = bpf_ringbuf_reserve(&new_pids, sizeof(*rec), 0);
	if (rec) {
		*rec = pid | ANNOUNCE_EXEC;
		bpf_ringbuf_submit(rec, 0);
		return 0;
	}
	count_event(STATS_NEW_PID_DROPS);
	return 0;
}

#endif /* BPFPROFILER_ANNOUNCE_H */
