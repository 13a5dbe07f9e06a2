// fixedwork: a fixed amount of CPU work on two threads, used by `make bench`
// to measure the slowdown profilers cause.
//
// Each thread runs ITERATIONS loop turns; every turn calls work_hot() three
// times and work_cold() once, so a correct profile shows ~75% of the samples
// in work_hot and ~25% in work_cold, both under worker().
//
// Usage: fixedwork [iterations]   (default 5600000 per thread, ~4 s on an idle
// 2-CPU VM)
// Prints its own wall time in nanoseconds on stdout at exit (one line). On
// stderr it prints a checksum of the results, so the compiler cannot drop the
// work, and "fixedwork: cpu_ns N", the CPU time (user+system) of the process.
//
// Build: cc -O2 -g -fno-omit-frame-pointer -pthread -o fixedwork fixedwork.c
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define THREADS 2
#define DEFAULT_ITERATIONS 5600000UL

// Inner rounds per call: enough that the call overhead is small, few enough
// that a sample lands inside the function body most of the time.
#define HOT_ROUNDS 64
#define COLD_ROUNDS 64

static unsigned long iterations = DEFAULT_ITERATIONS;

// A serial chain of multiplies, rotates and xors: each round depends on the
// previous one, so it can neither be vectorized nor folded to a closed form.
__attribute__((noinline)) uint64_t work_hot(uint64_t x) {
	for (int i = 0; i < HOT_ROUNDS; i++) {
		x ^= x >> 29;
		x *= 0xbf58476d1ce4e5b9ULL;
		x = (x << 17) | (x >> 47);
		x += (uint64_t)i;
	}
	return x;
}

// Different arithmetic from work_hot so the two never get merged.
__attribute__((noinline)) uint64_t work_cold(uint64_t x) {
	for (int i = 0; i < COLD_ROUNDS; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		x *= 0x94d049bb133111ebULL;
		x -= (uint64_t)i;
	}
	return x;
}

struct job {
	uint64_t seed;
	uint64_t result;
};

__attribute__((noinline)) static void *worker(void *arg) {
	struct job *j = arg;
	uint64_t acc = j->seed;
	for (unsigned long n = 0; n < iterations; n++) {
		acc = work_hot(acc);
		acc = work_hot(acc);
		acc = work_hot(acc);
		acc = work_cold(acc);
	}
	j->result = acc;
	return NULL;
}

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc > 2) {
		fprintf(stderr, "usage: %s [iterations]\n", argv[0]);
		return 2;
	}
	if (argc == 2) {
		char *end;
		errno = 0;
		iterations = strtoul(argv[1], &end, 10);
		if (errno != 0 || *end != '\0' || end == argv[1] || iterations == 0) {
			fprintf(stderr, "fixedwork: bad iterations \"%s\"\n", argv[1]);
			return 2;
		}
	}

	pthread_t threads[THREADS];
	struct job jobs[THREADS];
	uint64_t start = now_ns();
	for (int t = 0; t < THREADS; t++) {
		jobs[t].seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(t + 1);
		int err = pthread_create(&threads[t], NULL, worker, &jobs[t]);
		if (err != 0) {
			fprintf(stderr, "fixedwork: pthread_create: error %d\n", err);
			return 1;
		}
	}
	uint64_t sum = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(threads[t], NULL);
		sum ^= jobs[t].result;
	}
	uint64_t elapsed = now_ns() - start;

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	uint64_t cpu = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ULL +
		((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ULL;

	fprintf(stderr, "fixedwork: %lu iterations x %d threads, checksum %016llx\n",
		iterations, THREADS, (unsigned long long)sum);
	fprintf(stderr, "fixedwork: cpu_ns %llu\n", (unsigned long long)cpu);
	printf("%llu\n", (unsigned long long)elapsed);
	return 0;
}
