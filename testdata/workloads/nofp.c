// nofp: known call chains in code without frame pointers, for the unwinder's
// tests (the unwind tables come from .eh_frame, which gcc emits on x86-64).
// cflags: -O2 -fomit-frame-pointer
//
// Thread "chain": main -> chain_a -> chain_b -> chain_c -> chain_leaf, the
// leaf burning CPU. Thread "sorter": sorter -> sort_round -> qsort (glibc)
// -> compare_slow, the comparator burning CPU, so the walk goes through
// libc's own frames. Thread "napper": napper -> nap_round -> nap_leaf ->
// nanosleep (glibc), sleeping 2 ms at a time, for off-CPU walks. Thread
// "handled": handled -> sig_loop -> sig_leaf, a leaf spinning without a
// frame, interrupted every 4 ms of its CPU time by SIGUSR1, whose handler
// on_signal -> handler_burn burns CPU: the walk goes through the signal
// trampoline (glibc's __restore_rt, arm64's vdso) into the interrupted leaf.
// It rests in poll (not nanosleep: napper's) between rounds, so it takes
// about a third of a CPU, as the other two take one each.
// Usage: nofp [seconds]  (default 5).
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static double seconds = 5;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins; each level adds to its result after the call, so none of them is a tail call. */
__attribute__((noinline)) uint64_t chain_leaf(uint64_t seed)
{
	for (int i = 0; i < 200000; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	sink = seed;
	return seed;
}

__attribute__((noinline)) uint64_t chain_c(uint64_t seed)
{
	uint64_t buf[16]; /* a frame of its own on the stack */
	for (int i = 0; i < 16; i++)
		buf[i] = seed + i;
	return chain_leaf(buf[seed & 15]) + buf[3];
}

__attribute__((noinline)) uint64_t chain_b(uint64_t seed)
{
	return chain_c(seed * 3) + 1;
}

__attribute__((noinline)) uint64_t chain_a(uint64_t seed)
{
	return chain_b(seed + 7) ^ 5;
}

__attribute__((noinline)) static int compare_slow(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b, s = x ^ y;
	for (int i = 0; i < 400; i++) {
		s ^= s << 13;
		s ^= s >> 7;
	}
	sink = s;
	return x < y ? -1 : x > y;
}

__attribute__((noinline)) uint64_t sort_round(uint64_t seed)
{
	uint64_t v[512];
	for (int i = 0; i < 512; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		v[i] = seed;
	}
	qsort(v, 512, sizeof(v[0]), compare_slow);
	return v[0] + v[511];
}

__attribute__((noinline)) static void *sorter(void *arg)
{
	uint64_t seed = 88172645463325252ull, acc = 0;
	double end = now() + seconds;
	(void)arg;
	pthread_setname_np(pthread_self(), "sorter");
	while (now() < end)
		acc += sort_round(seed++);
	sink = acc;
	return NULL;
}

__attribute__((noinline)) uint64_t nap_leaf(uint64_t n)
{
	struct timespec ts = { 0, 2000000 }; /* 2 ms */

	nanosleep(&ts, NULL);
	return n * 3 + 1;
}

__attribute__((noinline)) uint64_t nap_round(uint64_t seed)
{
	uint64_t buf[8]; /* a frame of its own on the stack */
	for (int i = 0; i < 8; i++)
		buf[i] = seed + i;
	return nap_leaf(buf[seed & 7]) + buf[2];
}

__attribute__((noinline)) static void *napper(void *arg)
{
	uint64_t seed = 1, acc = 0;
	double end = now() + seconds;
	(void)arg;
	pthread_setname_np(pthread_self(), "napper");
	while (now() < end)
		acc += nap_round(seed++);
	sink = acc;
	return NULL;
}

__attribute__((noinline)) uint64_t handler_burn(uint64_t seed)
{
	for (int i = 0; i < 2000000; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	return seed;
}

__attribute__((noinline)) static void on_signal(int sig)
{
	sink = handler_burn(sink + sig) + 1;
}

/* A leaf without a frame: on arm64 its return address stays in x30. */
__attribute__((noinline)) uint64_t sig_leaf(uint64_t seed)
{
	for (int i = 0; i < 1000000; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
	}
	return seed;
}

__attribute__((noinline)) uint64_t sig_loop(uint64_t seed)
{
	uint64_t buf[8]; /* a frame of its own on the stack */
	for (int i = 0; i < 8; i++)
		buf[i] = seed + i;
	return sig_leaf(buf[seed & 7]) + buf[5];
}

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

__attribute__((noinline)) static void *handled(void *arg)
{
	struct sigevent ev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGUSR1 };
	struct itimerspec every = { { 0, 4000000 }, { 0, 4000000 } }; /* 4 ms of this thread's CPU */
	struct sigaction sa = { .sa_handler = on_signal };
	uint64_t seed = 7, acc = 0;
	double end = now() + seconds;
	timer_t timer;
	(void)arg;
	pthread_setname_np(pthread_self(), "handled");
	sigaction(SIGUSR1, &sa, NULL);
	ev.sigev_notify_thread_id = gettid();
	if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &timer) || timer_settime(timer, 0, &every, NULL)) {
		perror("nofp: timer");
		exit(1);
	}
	while (now() < end) {
		acc += sig_loop(seed++);
		poll(NULL, 0, 3);
	}
	timer_delete(timer);
	sink = acc;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t, nap, sig;
	uint64_t acc = 0, seed = 1;
	double end;

	if (argc > 1)
		seconds = atof(argv[1]);
	printf("%d\n", getpid());
	fflush(stdout);
	pthread_setname_np(pthread_self(), "chain");
	pthread_create(&t, NULL, sorter, NULL);
	pthread_create(&nap, NULL, napper, NULL);
	pthread_create(&sig, NULL, handled, NULL);
	end = now() + seconds;
	while (now() < end)
		acc += chain_a(seed++);
	pthread_join(t, NULL);
	pthread_join(nap, NULL);
	pthread_join(sig, NULL);
	sink = acc;
	return 0;
}
