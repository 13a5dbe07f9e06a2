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
 * forget_process sends the pid of an announced process that exited with
 * ANNOUNCE_EXIT set, and request_rescan the pid of a process whose walk ended
 * at an address in no known mapping with ANNOUNCE_RESCAN set (rate-limited,
 * see rescan_window), so user space follows exits and new mappings
 * (dlopen, JIT code) without polling every process.
 */
#ifndef BPFPROFILER_ANNOUNCE_H
#define BPFPROFILER_ANNOUNCE_H

#include "common.h"
#include "drainmaps.h"
#include <bpf/bpf_tracing.h>

#define MAX_SEEN_PIDS 16384
#define NEW_PIDS_BYTES (16 * 1024)
/* Set in a new_pids entry (pids are below 2^22): the process exec'ed, */
#define ANNOUNCE_EXEC 0x80000000u
/* exited, */
#define ANNOUNCE_EXIT 0x40000000u
/* or has mappings its tables do not cover. */
#define ANNOUNCE_RESCAN 0x20000000u
/*
 * A new process asks no rescan before its tables load (user space defers
 * the load 100 ms, so short-lived processes cost no read); then at most one
 * per interval, from RESCAN_MIN_NS doubling to RESCAN_MAX_NS: a program
 * loading its libraries at start (dlopen at import) is followed within a
 * fraction of a second, a JIT steadily adding code once per 2 s.
 */
#define RESCAN_FIRST_NS (250ULL * 1000 * 1000)
#define RESCAN_MIN_NS (250ULL * 1000 * 1000)
#define RESCAN_MAX_NS (2ULL * 1000 * 1000 * 1000)

struct rescan_window {
	u64 next;     /* no rescan asked before this time */
	u64 interval; /* the wait after the next one asked */
};

/* Host tgids already announced in new_pids. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SEEN_PIDS);
	__type(key, u32);
	__type(value, u8);
} seen_pids SEC(".maps");

/* Host tgids: when a rescan of their mappings may next be asked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SEEN_PIDS);
	__type(key, u32);
	__type(value, struct rescan_window);
} rescan_after SEC(".maps");

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
	struct rescan_window w = {};
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
	 * New processes are rare next to records: wake the reader, which reads
	 * announcements in batches every 50 ms (internal/stackdrain) and needs
	 * no polling when the host is idle.
	 */
	bpf_ringbuf_submit(rec, 0);
	/* Its tables load soon: its samples until then ask no rescan. */
	w.next = bpf_ktime_get_ns() + RESCAN_FIRST_NS;
	w.interval = RESCAN_MIN_NS;
	bpf_map_update_elem(&rescan_after, &host_tgid, &w, BPF_ANY);
}

/*
 * Sends the current process's pid (as the collector sees it) with flag set,
 * from a tracepoint of the process itself: one outside the collector's pid
 * namespace sends nothing. A full ring buffer is counted in new_pid_drops of
 * the current generation, inside the inflight protocol (see cpu.bpf.c);
 * user space then checks every process it follows.
 */
static __always_inline void send_pid(u32 flag)
{
	struct sampler_config *cfg;
	u32 zero = 0, pid, tid;
	u32 *rec;

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || current_ids(cfg, &pid, &tid))
		return;
	rec = bpf_ringbuf_reserve(&new_pids, sizeof(*rec), 0);
	if (rec) {
		*rec = pid | flag;
		bpf_ringbuf_submit(rec, 0);
		return;
	}
	count_event(STATS_NEW_PID_DROPS);
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

	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&rescan_after, &tgid);
	/* Never announced (never recorded, or a kernel thread): nothing to say. */
	if (bpf_map_delete_elem(&seen_pids, &tgid))
		return 0;
	/* p is current, still in its pid namespace. */
	send_pid(ANNOUNCE_EXIT);
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
	u32 tgid = p->tgid;

	if (bpf_map_delete_elem(&seen_pids, &tgid))
		return 0;
	bpf_map_delete_elem(&rescan_after, &tgid);
	send_pid(ANNOUNCE_EXEC);
	return 0;
}

/*
 * A walk of a process found an address in no mapping its tables know (a
 * library loaded later, new JIT code): asks user space to read its mappings
 * again, at most once per the process's rescan_window. Only announced processes
 * have tables to complete.
 */
static __always_inline void request_rescan(u32 host_tgid, u32 pid, struct sampler_stats *st)
{
	struct rescan_window *after = bpf_map_lookup_elem(&rescan_after, &host_tgid);
	struct rescan_window w = { .interval = RESCAN_MAX_NS };
	u64 now = bpf_ktime_get_ns();
	u32 *rec;

	if (after) {
		if (after->next > now)
			return;
		w.interval = after->interval;
	}
	if (!bpf_map_lookup_elem(&seen_pids, &host_tgid))
		return;
	w.next = now + w.interval;
	w.interval = w.interval * 2 < RESCAN_MAX_NS ? w.interval * 2 : RESCAN_MAX_NS;
	bpf_map_update_elem(&rescan_after, &host_tgid, &w, BPF_ANY);
	rec = bpf_ringbuf_reserve(&new_pids, sizeof(*rec), 0);
	if (!rec) {
		st->new_pid_drops++;
		return;
	}
	*rec = pid | ANNOUNCE_RESCAN;
	bpf_ringbuf_submit(rec, 0);
}

#endif /* BPFPROFILER_ANNOUNCE_H */
