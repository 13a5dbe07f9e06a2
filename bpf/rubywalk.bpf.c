//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A test program (internal/runtimes/ruby's live walker test): attached to
 * cpu-clock perf events, it walks the Ruby frames (ruby.h) of every sampled
 * thread of a process in ruby_procs and sends what it found to walks.
 */
#include "ruby.h"

/* One walk: the thread, why it ended (enum runtime_end) and its words. */
struct rubywalk_record {
	u32 tid;
	s32 end;
	u32 count;
	u32 reserved;
	u64 frames[MAX_STACK_DEPTH];
};

/* Keeps the record type in BTF for bpf2go -type. */
const struct rubywalk_record *unused_rubywalk_record __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} walks SEC(".maps");

SEC("perf_event")
int rubywalk(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 pid = id >> 32, n = 0;
	struct ruby_proc *p = bpf_map_lookup_elem(&ruby_procs, &pid);
	struct rubywalk_record *r;

	if (!p)
		return 0;
	r = bpf_ringbuf_reserve(&walks, sizeof(*r), 0);
	if (!r)
		return 0;
	r->tid = (u32)id;
	r->end = ruby_walk(p, r->frames, &n);
	r->count = n;
	r->reserved = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
