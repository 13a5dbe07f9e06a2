// otelmem: a native allocator announcing its allocations with the
// OpenTelemetry memory probes otel_memory:alloc(ptr, size, weighted_bytes)
// and otel_memory:free(ptr) (guarded by semaphores), for the allocation
// profile tests of internal/allocs.
//
// Each round alloc_big allocates 3 bytes for each byte alloc_small
// allocates (sizes drawn from the same sequence); every other object of
// each is kept live in the function's ring (replacing, and freeing, the
// oldest one there) and the others are freed at once. Every 100 ms it
// prints "live big=<bytes> small=<bytes> rounds=<n>": the exact bytes
// each function's ring holds. Runs for the seconds given (default 10),
// ROUNDS_PER_SECOND rounds a second.
// Its own directory: the kernel matrix builds testdata/workloads/*.c with
// a cross compiler that has no <sys/sdt.h>.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING 4096
#define ROUNDS_PER_SECOND 5000

volatile unsigned short otel_memory_alloc_semaphore __attribute__((section(".probes")));
volatile unsigned short otel_memory_free_semaphore __attribute__((section(".probes")));

struct ring {
	void *objs[RING];
	uint64_t sizes[RING];
	unsigned next;
	uint64_t live;
};

static struct ring big_ring, small_ring;

__attribute__((noinline)) static void *traced_malloc(uint64_t size)
{
	void *p = malloc(size);

	memset(p, 1, size);
	if (otel_memory_alloc_semaphore)
		STAP_PROBE3(otel_memory, alloc, p, size, size);
	return p;
}

__attribute__((noinline)) static void traced_free(void *p)
{
	if (otel_memory_free_semaphore)
		STAP_PROBE1(otel_memory, free, p);
	free(p);
}

/* Allocates size bytes; keep: into r (freeing its oldest), else freed at once. */
static void allocate(struct ring *r, uint64_t size, int keep)
{
	void *p = traced_malloc(size);

	if (!keep) {
		traced_free(p);
		return;
	}
	if (r->objs[r->next]) {
		traced_free(r->objs[r->next]);
		r->live -= r->sizes[r->next];
	}
	r->objs[r->next] = p;
	r->sizes[r->next] = size;
	r->live += size;
	r->next = (r->next + 1) % RING;
}

__attribute__((noinline)) void alloc_big(uint64_t size, int keep)
{
	allocate(&big_ring, 3 * size, keep);
	__asm__ volatile("" ::: "memory"); /* no tail call: alloc_big stays on the stack */
}

__attribute__((noinline)) void alloc_small(uint64_t size, int keep)
{
	allocate(&small_ring, size, keep);
	__asm__ volatile("" ::: "memory");
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10, start = now(), next_print = start;
	uint64_t rounds = 0, seed = 42;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (now() - start < seconds) {
		/* A batch of rounds, then sleep until the rate is met. */
		for (int i = 0; i < ROUNDS_PER_SECOND / 100; i++, rounds++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t size = 16 + (seed >> 33) % 497; /* 16..512 */
			alloc_big(size, rounds & 1);
			alloc_small(size, rounds & 1);
		}
		double due = start + (double)rounds / ROUNDS_PER_SECOND, t = now();
		if (due > t) {
			struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)((due - t) * 1e9) };
			nanosleep(&ts, NULL);
		}
		if (now() >= next_print) {
			printf("live big=%llu small=%llu rounds=%llu\n", (unsigned long long)big_ring.live,
			       (unsigned long long)small_ring.live, (unsigned long long)rounds);
			next_print += 0.1;
		}
	}
	return 0;
}
