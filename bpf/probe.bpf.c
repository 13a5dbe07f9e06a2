//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Duration probes: probe_entry / probe_exit are attached as uprobes (or the
 * exit side as a uretprobe) to user functions; the attach cookie carries the
 * probe index. A per-(thread, probe) depth counter makes nested scopes roll
 * up into the outermost one: only that one is timed, filtered by
 * min_duration_ns and a per-probe rate limit, and sent to user space through
 * the records ringbuf.
 *
 * Thread exit (and exec) removes the thread's scope state, so a reused tid
 * never inherits a stale depth. Exec events also go to user space (execs
 * ringbuf) so probes can be attached to files newly started processes map.
 */
#include "common.h"

#define RECORDS_BYTES (256 * 1024)
/* Wake the reader once a quarter of the records buffer is in use. */
#define RECORDS_WAKEUP_BYTES (RECORDS_BYTES / 4)
#include <bpf/bpf_tracing.h>

#define MAX_PROBES 64
#define MAX_THREAD_SCOPES 65536

/* Per-probe settings, indexed by probe index; written by user space. */
struct probe_config {
	u64 min_duration_ns;
	u32 main_thread_only;
	u32 pad;
	/*
	 * Rate limit (see rate_allows): one record per rate_interval_ns on
	 * average, bursts of rate_burst_ns / rate_interval_ns + 1 records.
	 * rate_interval_ns 0: unlimited.
	 */
	u64 rate_interval_ns;
	u64 rate_burst_ns;
};

/* One completed outermost scope. Times are bpf_ktime_get_ns (CLOCK_MONOTONIC). */
struct probe_record {
	u64 start_ns;
	u64 end_ns;
	u32 pid; /* tgid as the collector sees it (see pidns_dev) */
	u32 tid; /* thread id as the collector sees it */
	u32 probe_index;
	char comm[TASK_COMM_LEN];
	u32 pad;
};

/* Per-CPU counters; user space sums them. */
struct probe_stats {
	u64 records;
	u64 exec_dropped; /* execs ringbuf full */
};

/* Per-probe, per-CPU counts of completed scopes not sent to user space. */
struct probe_drops {
	u64 rate_limited; /* over the probe's rate limit */
	u64 ringbuf_full; /* records ringbuf full */
};

struct scope_key {
	u32 tid;
	u32 probe_index;
};

struct scope_state {
	u64 start_ns;
	u32 depth;
	u32 pad;
};

/* Keeps the ringbuf record type in BTF for bpf2go -type. */
const struct probe_record *unused_probe_record __attribute__((unused));

/* Number of probes in use (entries of probe_configs); set at load time. */
const volatile u32 nr_probes = 0;

/*
 * Non-zero when the collector runs in a child pid namespace: the nsfs device
 * and inode of that namespace, set at load time. Records and exec events then
 * carry ids as seen from it (current_ids), and threads outside it are not
 * reported. Scope state stays keyed by host thread id, which thread exit and
 * exec know without translation.
 */
const volatile u64 pidns_dev = 0;
const volatile u64 pidns_ino = 0;

/* The current thread's ids as the collector sees them; non-zero outside its pid namespace. */
static __always_inline int collector_ids(u32 *tgid, u32 *tid)
{
	struct sampler_config ns = { .pidns_dev = pidns_dev, .pidns_ino = pidns_ino };

	return current_ids(&ns, tgid, tid);
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, struct probe_config);
} probe_configs SEC(".maps");

/* LRU: should cleanup ever be missed, old entries make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREAD_SCOPES);
	__type(key, struct scope_key);
	__type(value, struct scope_state);
} scopes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RECORDS_BYTES);
} records SEC(".maps");

/* Tgids (as the collector sees them) of processes that just exec'ed (u32 each). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} execs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct probe_stats);
} stats SEC(".maps");

/* Indexed by probe index. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, struct probe_drops);
} drops SEC(".maps");

/*
 * Per-probe theoretical arrival time of the next record (ktime ns) of the
 * rate limit; shared by every CPU so the limit holds per probe, not per CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, u32);
	__type(value, u64);
} rate_tat SEC(".maps");

/*
 * The probe's rate limit, as a generic cell rate algorithm (a token bucket
 * in one word): a record is allowed when it is at most rate_burst_ns ahead
 * of schedule, and then moves the schedule by rate_interval_ns. Two CPUs
 * racing on the word may both pass (one update is lost): the limit is
 * exceeded by at most one record per racing CPU, which needs no atomics
 * beyond what every supported kernel has.
 */
static __always_inline int rate_allows(const struct probe_config *cfg, u32 index, u64 now)
{
	u64 *tat, next;

	if (!cfg->rate_interval_ns)
		return 1;
	tat = bpf_map_lookup_elem(&rate_tat, &index);
	if (!tat)
		return 1;
	next = *tat > now ? *tat : now;
	if (next - now > cfg->rate_burst_ns)
		return 0;
	*tat = next + cfg->rate_interval_ns;
	return 1;
}

SEC("uprobe")
int probe_entry(struct pt_regs *ctx)
{
	u32 index = (u32)bpf_get_attach_cookie(ctx);
	u64 id = bpf_get_current_pid_tgid();
	struct scope_key key = { .tid = (u32)id, .probe_index = index };
	struct probe_config *cfg;
	struct scope_state *st;

	cfg = bpf_map_lookup_elem(&probe_configs, &index);
	if (!cfg)
		return 0;
	/* main_thread_only: worker threads keep no state at all. */
	if (cfg->main_thread_only && (u32)id != (u32)(id >> 32))
		return 0;
	st = bpf_map_lookup_elem(&scopes, &key);
	if (!st) {
		struct scope_state init = { .start_ns = bpf_ktime_get_ns(), .depth = 1 };

		bpf_map_update_elem(&scopes, &key, &init, BPF_ANY);
		return 0;
	}
	if (st->depth == 0)
		st->start_ns = bpf_ktime_get_ns();
	st->depth++;
	return 0;
}

SEC("uprobe")
int probe_exit(struct pt_regs *ctx)
{
	u32 index = (u32)bpf_get_attach_cookie(ctx);
	u64 id = bpf_get_current_pid_tgid();
	struct scope_key key = { .tid = (u32)id, .probe_index = index };
	struct probe_record *rec;
	struct probe_config *cfg;
	struct probe_drops *drop;
	struct probe_stats *cnt;
	struct scope_state *st;
	u32 zero = 0, pid, tid;
	u64 now;

	st = bpf_map_lookup_elem(&scopes, &key);
	if (!st || st->depth == 0) /* exit without entry: attached mid-scope */
		return 0;
	if (--st->depth)
		return 0;
	now = bpf_ktime_get_ns();
	cfg = bpf_map_lookup_elem(&probe_configs, &index);
	cnt = bpf_map_lookup_elem(&stats, &zero);
	drop = bpf_map_lookup_elem(&drops, &index);
	if (!cfg || !cnt || !drop)
		return 0;
	if (now - st->start_ns < cfg->min_duration_ns)
		return 0;
	if (collector_ids(&pid, &tid)) /* a process the collector cannot see */
		return 0;
	/* Before the reserve: a hot probe costs the reader nothing beyond its limit. */
	if (!rate_allows(cfg, index, now)) {
		drop->rate_limited++;
		return 0;
	}
	rec = bpf_ringbuf_reserve(&records, sizeof(*rec), 0);
	if (!rec) {
		drop->ringbuf_full++;
		return 0;
	}
	rec->start_ns = st->start_ns;
	rec->end_ns = now;
	rec->pid = pid;
	rec->tid = tid;
	rec->probe_index = index;
	rec->pad = 0;
	bpf_get_current_comm(rec->comm, sizeof(rec->comm));
	/*
	 * Waking the reader for every record costs the traced thread more than
	 * the probe itself (a cross-CPU wakeup, expensive in a VM): wake it only
	 * when the buffer fills up; user space also polls it every few tens of
	 * milliseconds.
	 */
	bpf_ringbuf_submit(rec, bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= RECORDS_WAKEUP_BYTES
					? BPF_RB_FORCE_WAKEUP
					: BPF_RB_NO_WAKEUP);
	cnt->records++;
	return 0;
}

static __always_inline void forget_thread(u32 tid)
{
	struct scope_key key = { .tid = tid };

	for (u32 i = 0; i < MAX_PROBES; i++) {
		if (i >= nr_probes)
			break;
		key.probe_index = i;
		bpf_map_delete_elem(&scopes, &key);
	}
}

/* Every exiting thread: drop its scope state. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(probe_thread_exit, struct task_struct *p)
{
	forget_thread(BPF_CORE_READ(p, pid));
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(probe_exec, struct task_struct *p, int old_pid)
{
	struct probe_stats *cnt;
	u32 zero = 0, tgid, tid;
	u32 *pid;

	/* The new image starts with no open scopes. */
	forget_thread(BPF_CORE_READ(p, pid));
	if ((u32)old_pid != (u32)BPF_CORE_READ(p, pid))
		forget_thread(old_pid);

	/* p is current: its tgid as the collector sees it, if it can. */
	if (collector_ids(&tgid, &tid))
		return 0;
	pid = bpf_ringbuf_reserve(&execs, sizeof(*pid), 0);
	if (!pid) {
		cnt = bpf_map_lookup_elem(&stats, &zero);
		if (cnt)
			cnt->exec_dropped++;
		return 0;
	}
	*pid = tgid;
	bpf_ringbuf_submit(pid, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
