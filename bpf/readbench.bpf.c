//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A test and bench program (never attached): runs thread_ctx_read on the
 * calling thread through BPF_PROG_TEST_RUN, args[1] times, and times the
 * loop, so the readers' cost per sample can be measured apart from the rest
 * of a sample (bench suite readers) and what they read can be checked
 * against a process whose memory the test wrote (readbench_linux_test.go).
 * args[0] is the pid key of context_procs; args[2] what each call does
 * (readbench.Mode): 1 read with the user registers at hand, as a CPU
 * sample in user mode has them, 2 one 8-byte read of user memory at
 * args[3] to the stack, 3 the same to a map value, 4 a read (registers at
 * hand) after another context on the CPU (its stored id args[3]), 5 a read
 * taking the registers the thread saved entering the kernel, as off-CPU
 * samples do, 0 nothing (the loop's own cost).
 */
#include "threadctx.h"

/* Reads per run at most: a bounded loop the verifier walks once per read. */
#define READBENCH_MAX_READS 2048

struct readbench_result {
	u64 ns;		 /* bpf_ktime_get_ns over the loop */
	u32 reads;	 /* the calls made */
	u32 outcome;	 /* the last read's enum thread_ctx_outcome */
	u8 trace_id[16]; /* the last read's */
	u8 span_id[8];
	s32 attrs_id; /* the last read's keys in thread_ctx_attrs */
	u32 go_labels_id;
	u32 truncated; /* the last read's, thread context's or Go's */
	u32 lost;
	u64 thread_pointer; /* the calling thread's, as the readers take it */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct readbench_result);
} readbench_results SEC(".maps");

/* The calling thread's user registers through the stack pointer, copied once a run. */
#define READBENCH_REGS (UREGS_SP / 8 + 1)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64[READBENCH_REGS]);
} readbench_regs SEC(".maps");

/*
 * The user registers run_readbench copied, as a CPU sample in user mode
 * has its own (at_hand), else 0: those the thread saved entering the
 * kernel, as off-CPU samples take them.
 */
static __always_inline const u64 *readbench_regs_at_hand(int at_hand)
{
	u32 zero = 0;

	return at_hand ? bpf_map_lookup_elem(&readbench_regs, &zero) : 0;
}

/* A read, the registers at hand or not. */
__attribute__((noinline)) int readbench_read(u32 pid, int at_hand)
{
	thread_ctx_read(pid, readbench_regs_at_hand(at_hand));
	return 0;
}

/* One 8-byte read of user memory at addr: the unit the readers pay per read. */
__attribute__((noinline)) int readbench_one_read(u64 addr)
{
	u64 v = 0;

	return bpf_probe_read_user(&v, sizeof(v), (void *)addr) ? 0 : (int)(v & 1);
}

/* The same read into a per-CPU map value, as the readers' copies go. */
__attribute__((noinline)) int readbench_one_read_map(u64 addr)
{
	u32 zero = 0;
	struct thread_ctx_scratch *sc = bpf_map_lookup_elem(&thread_ctx_scratch, &zero);

	if (!sc)
		return 0;
	return bpf_probe_read_user(sc->raw, 8, (void *)addr) ? 0 : 1;
}

/* A read after the CPU's last stored context was another, stored under id. */
__attribute__((noinline)) int readbench_read_after(u32 pid, u64 id)
{
	u32 zero = 0;
	struct thread_ctx_scratch *sc = bpf_map_lookup_elem(&thread_ctx_scratch, &zero);

	if (!sc)
		return 0;
	sc->last_id = id;
	sc->last_count = 0; /* its words are not these */
	thread_ctx_read(pid, readbench_regs_at_hand(1));
	return 0;
}

/* The loop's own cost: a call that reads nothing. */
__attribute__((noinline)) int readbench_empty(u32 pid)
{
	return pid == 0;
}

/* One call of mode's function: the loop branches in no other place. */
__attribute__((noinline)) int readbench_call(u32 mode, u32 pid, u64 addr)
{
	switch (mode) {
	case 1:
		return readbench_read(pid, 1);
	case 2:
		return readbench_one_read(addr);
	case 3:
		return readbench_one_read_map(addr);
	case 4:
		return readbench_read_after(pid, addr);
	case 5:
		return readbench_read(pid, 0);
	default:
		return readbench_empty(pid);
	}
}

/* Copies the calling thread's user registers, as saved entering the kernel, to readbench_regs. */
static __always_inline void readbench_copy_regs(void)
{
	u32 zero = 0;
	u64 *regs = bpf_map_lookup_elem(&readbench_regs, &zero);
	u64 base = saved_user_regs_base((struct task_struct *)bpf_get_current_task());

	if (regs && base)
		bpf_probe_read_kernel(regs, READBENCH_REGS * 8, (void *)base); /* else zeros: g found in TLS */
}

SEC("raw_tp")
int run_readbench(u64 *ctx)
{
	u32 pid = ctx[0], reads = ctx[1], mode = ctx[2], zero = 0, n = 0;
	u64 addr = ctx[3];
	struct readbench_result *res = bpf_map_lookup_elem(&readbench_results, &zero);
	struct thread_ctx_result *r;
	u64 start;

	if (!res)
		return 1;
	readbench_copy_regs();
	start = bpf_ktime_get_ns();
	for (u32 i = 0; i < READBENCH_MAX_READS && i < reads; i++) {
		readbench_call(mode, pid, addr);
		n++;
	}
	res->ns = bpf_ktime_get_ns() - start;
	res->reads = n;
	res->thread_pointer = user_thread_pointer();
	r = bpf_map_lookup_elem(&thread_ctx_results, &zero);
	if (!r)
		return 1;
	res->outcome = r->outcome;
	__builtin_memcpy(res->trace_id, r->trace_id, sizeof(res->trace_id));
	__builtin_memcpy(res->span_id, r->span_id, sizeof(res->span_id));
	res->attrs_id = r->attrs_id;
	res->go_labels_id = r->go_labels_id;
	res->truncated = r->truncated | r->go_truncated;
	res->lost = r->lost | r->go_lost;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
