// cpuburn: two threads burning CPU in two known functions, for profiler tests.
//
// Each thread loops: 3 ms of its own CPU time in burn_hot(), 1 ms in
// burn_cold(), so a profile shows about 75% / 25% between them.
// Usage: cpuburn [seconds]  (default 5). Prints its pid first.
// Build: cc -O1 -g -fno-omit-frame-pointer -pthread -o cpuburn cpuburn.c
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static uint64_t thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin for ns of thread CPU time; the xorshift result is published to sink. */
__attribute__((noinline)) uint64_t burn_hot(uint64_t ns, uint64_t seed)
{
	uint64_t end = thread_ns() + ns;
	do {
		for (int i = 0; i < 4096; i++) {
			seed ^= seed << 13;
			seed ^= seed >> 7;
			seed ^= seed << 17;
		}
	} while (thread_ns() < end);
	sink = seed;
	return seed;
}

__attribute__((noinline)) uint64_t burn_cold(uint64_t ns, uint64_t seed)
{
	uint64_t end = thread_ns() + ns;
	do {
		for (int i = 0; i < 4096; i++)
			seed = seed * 6364136223846793005u + 1442695040888963407u;
	} while (thread_ns() < end);
	sink = seed;
	return seed;
}

struct burner {
	const char *name;
	uint64_t until;
};

static void *run(void *arg)
{
	struct burner *b = arg;
	uint64_t seed = (uint64_t)(uintptr_t)b | 1;

	pthread_setname_np(pthread_self(), b->name);
	while (wall_ns() < b->until) {
		seed = burn_hot(3000000, seed);
		seed = burn_cold(1000000, seed);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	uint64_t until = wall_ns() + (uint64_t)(seconds * 1e9);
	struct burner b[2] = {{"burner-1", until}, {"burner-2", until}};
	pthread_t t[2];

	printf("%d\n", getpid());
	fflush(stdout);
	for (int i = 0; i < 2; i++) {
		if (pthread_create(&t[i], NULL, run, &b[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}
