//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test-only programs of the PHP walker (php.h), driven by
 * internal/runtimes/php's tests:
 * - sample_php, a cpu-clock perf_event program: walks the PHP frames of
 *   target_pid's user-mode samples from the sample's pc and opline register
 *   and sends each walk to walks;
 * - run_php_walk, run through BPF_PROG_TEST_RUN in the test's own process:
 *   walks the chain php_walk_input describes (built in the test's memory).
 */
#include "common.h"
#include "arch.h"
#include "php.h"

/* The pid (tgid) whose samples sample_php walks. */
const volatile u32 target_pid = 0;

/* One walk: the thread, the sample's pc, why the walk ended and its frames. */
struct php_walk_record {
	u32 tid;
	s32 end; /* enum runtime_end */
	u32 n;
	u32 reserved;
	u64 pc;
	u64 frames[MAX_STACK_DEPTH];
};

/* The input of run_php_walk: the process, the pc and the opline register. */
struct php_walk_input {
	struct php_proc proc;
	u64 pc;
	u64 vm_reg;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} walks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct php_walk_input);
} walk_input SEC(".maps");

/* run_php_walk's walk. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct php_walk_record);
} walk_output SEC(".maps");

/* Keeps the record type in BTF for bpf2go -type. */
const struct php_walk_record *unused_php_walk_record __attribute__((unused));

SEC("perf_event")
int sample_php(struct bpf_perf_event_data *ctx)
{
	const u64 *regs = (const u64 *)ctx;
	u64 id = bpf_get_current_pid_tgid();
	struct php_walk_record *r;
	struct php_proc *p;
	u32 pid = id >> 32;

	if (pid != target_pid || !user_mode_regs(regs))
		return 0;
	p = bpf_map_lookup_elem(&php_procs, &pid);
	if (!p)
		return 0;
	r = bpf_ringbuf_reserve(&walks, sizeof(*r), 0);
	if (!r)
		return 0;
	r->tid = (u32)id;
	r->reserved = 0;
	r->pc = regs[UREGS_IP / 8];
	r->end = php_walk(p, r->pc, regs[PHP_UREGS_OPLINE / 8], r->frames, &r->n);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("raw_tp")
int run_php_walk(void *ctx)
{
	struct php_walk_input *in;
	struct php_walk_record *r;
	u32 zero = 0;

	in = bpf_map_lookup_elem(&walk_input, &zero);
	r = bpf_map_lookup_elem(&walk_output, &zero);
	if (!in || !r)
		return 0;
	r->tid = (u32)bpf_get_current_pid_tgid();
	r->pc = in->pc;
	r->end = php_walk(&in->proc, in->pc, in->vm_reg, r->frames, &r->n);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
