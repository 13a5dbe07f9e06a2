// spans: an OpenTelemetry SDK's thread context (OTEP 4947) as a C SDK
// publishes it, and a program using it. The thread-local pointer
// otel_thread_ctx_v1 (exported in .dynsym) points at span A's record while
// span_a_work burns 30 ms of CPU, at span B's while span_b_work burns 10,
// and is NULL while gap_work burns 10: samples are 3:1:1 in A, B and none.
// Span A's record carries the attribute of key index 0 (http.route), which
// the process context (otelctx.h) it publishes names, with its service.name
// spans-checkout.
//
// Built whole, the program defines the variable itself (local-exec). Built
// with -DSPANS_SDK_ONLY -shared -fPIC it is the SDK library alone
// (libspans.so: TLS descriptors with -mtls-dialect=gnu2, general dynamic
// otherwise), and with -DSPANS_PROGRAM_ONLY the program that links it.
//
// A second thread (not with flip) sleeps 2 ms at a time in waiter_sleep
// inside span C (its record attached for good): its off-CPU samples link
// to C.
//
// Usage: spans [seconds] [where|flip]: prints its pid; with "where", the
// thread pointer and the variable's address too ("tp=0x.. var=0x.."). With
// "flip", the main thread keeps one record attached and rewrites it in
// place between spans X (trace 0x50..) and Y (0x60..), invalid while it
// writes, burning 5 ms in flip_x_work and flip_y_work in turn: no sample
// may carry a mix of the two, or the other span's ids.
// cflags: -O1 -pthread -Wl,--export-dynamic-symbol=otel_thread_ctx_v1
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The record (OTEP 4947): packed, 28 bytes before the attributes. */
struct otel_thread_ctx_record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs_data[64];
} __attribute__((packed));

void sdk_attach(struct otel_thread_ctx_record *r);
void sdk_detach(void);
void *sdk_variable(void);

#ifndef SPANS_PROGRAM_ONLY
__attribute__((visibility("default"))) __thread struct otel_thread_ctx_record *volatile otel_thread_ctx_v1;

void sdk_attach(struct otel_thread_ctx_record *r)
{
	r->valid = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	otel_thread_ctx_v1 = r;
}

void sdk_detach(void)
{
	otel_thread_ctx_v1 = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

void *sdk_variable(void)
{
	return (void *)&otel_thread_ctx_v1;
}
#endif

#ifndef SPANS_SDK_ONLY
#include <pthread.h>

#include "otelctx.h"

static volatile uint64_t sink;
/* TLS of the program's own: a library's block is not the first. */
static __thread volatile uint64_t rounds[3];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns ms milliseconds of this thread's CPU time (preemption does not count). */
static void burn(double ms)
{
	double end = cpu_now() + ms / 1e3;
	uint64_t s = sink | 1;

	while (cpu_now() < end) {
		for (int i = 0; i < 1000; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
		}
	}
	sink = s;
	rounds[0]++;
}

__attribute__((noinline)) void span_a_work(void) { burn(30); }
__attribute__((noinline)) void span_b_work(void) { burn(10); }
__attribute__((noinline)) void gap_work(void) { burn(10); }
__attribute__((noinline)) void flip_x_work(void) { burn(5); }
__attribute__((noinline)) void flip_y_work(void) { burn(5); }

/* Rewrites r in place to span first's ids, invalid meanwhile (a writer that keeps its record attached). */
static void rewrite(volatile struct otel_thread_ctx_record *r, uint8_t first)
{
	r->valid = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	for (int i = 0; i < 16; i++) {
		r->trace_id[i] = (uint8_t)(first + i);
		if (i == 8)
			burn(0.05); /* a sample may land mid-write: the record is invalid then */
	}
	for (int i = 0; i < 8; i++)
		r->span_id[i] = (uint8_t)(first + 0x80 + i);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	r->valid = 1;
}

static uintptr_t thread_pointer(void)
{
	uintptr_t tp;
#if defined(__x86_64__)
	__asm__("mov %%fs:0, %0" : "=r"(tp));
#elif defined(__aarch64__)
	__asm__("mrs %0, tpidr_el0" : "=r"(tp));
#else
#error "x86-64 or arm64"
#endif
	return tp;
}

static void record(struct otel_thread_ctx_record *r, uint8_t first, const char *route);

__attribute__((noinline)) void waiter_sleep(void)
{
	struct timespec ts = { 0, 2000000 };

	nanosleep(&ts, NULL);
}

static void *waiter(void *arg)
{
	static struct otel_thread_ctx_record c;

	(void)arg;
	record(&c, 0x30, NULL);
	sdk_attach(&c);
	for (;;)
		waiter_sleep();
	return NULL;
}

static void record(struct otel_thread_ctx_record *r, uint8_t first, const char *route)
{
	memset(r, 0, sizeof(*r));
	for (int i = 0; i < 16; i++)
		r->trace_id[i] = (uint8_t)(first + i);
	for (int i = 0; i < 8; i++)
		r->span_id[i] = (uint8_t)(first + 0x80 + i);
	r->trace_flags = 1;
	if (route) {
		size_t n = strlen(route);

		r->attrs_data[0] = 0; /* key index 0: http.route */
		r->attrs_data[1] = (uint8_t)n;
		memcpy(r->attrs_data + 2, route, n);
		r->attrs_data_size = (uint16_t)(2 + n);
	}
}

int main(int argc, char **argv)
{
	static struct otel_thread_ctx_record a, b;
	double seconds = argc > 1 ? atof(argv[1]) : 10, end = now() + seconds;

	static const char *const keys[] = { "http.route" };

	pthread_t w;

	otelctx_publish("spans-checkout", keys, 1, 0);
	record(&a, 0x10, "/checkout");
	record(&b, 0x20, NULL);
	if (argc > 2 && !strcmp(argv[2], "where")) {
		sdk_attach(&a);
		printf("%d tp=%#lx var=%#lx\n", getpid(), (unsigned long)thread_pointer(), (unsigned long)sdk_variable());
	} else {
		printf("%d\n", getpid());
	}
	fflush(stdout);
	if (argc > 2 && !strcmp(argv[2], "flip")) {
		static struct otel_thread_ctx_record f;

		record(&f, 0x50, NULL);
		sdk_attach(&f);
		while (now() < end) {
			rewrite(&f, 0x50);
			flip_x_work();
			rewrite(&f, 0x60);
			flip_y_work();
		}
		return 0;
	}
	pthread_create(&w, NULL, waiter, NULL);
	while (now() < end) {
		sdk_attach(&a);
		span_a_work();
		sdk_attach(&b);
		span_b_work();
		sdk_detach();
		gap_work();
	}
	return 0;
}
#endif
