// Workload of the sampler's high-rate tests: burns CPU at the bottom of
// call chains of pseudo-random depth (1..64) through four functions, so
// almost every sample has a user stack never seen before.
//
//   deepstacks <seconds> [stdin]
//
// With "stdin" it burns only after reading a line from stdin, then prints
// "done" and waits for another line (no CPU used while waiting), so a test
// can read the process's CPU time around exactly the burn.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static unsigned long long xorshift(unsigned long long *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

typedef unsigned long long (*step_fn)(int, unsigned long long *);
static step_fn steps[4];

/* A short burn at the bottom of a chain: about 20 µs. */
__attribute__((noinline)) static unsigned long long leaf(unsigned long long *s)
{
	unsigned long long x = *s;
	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	__asm__ volatile("" : "+r"(x));
	return x;
}

#define STEP(name)                                                                \
	__attribute__((noinline)) static unsigned long long name(int depth,       \
							  unsigned long long *s)  \
	{                                                                         \
		unsigned long long r;                                             \
		if (depth == 0)                                                   \
			r = leaf(s);                                              \
		else                                                              \
			r = steps[xorshift(s) & 3](depth - 1, s);                  \
		__asm__ volatile("" : "+r"(r));                                   \
		return r + 1;                                                     \
	}

STEP(step_a)
STEP(step_b)
STEP(step_c)
STEP(step_d)

int main(int argc, char **argv)
{
	unsigned long long seed = 88172645463325252ull, acc = 0, end;
	char line[16];
	int gate = argc > 2 && strcmp(argv[2], "stdin") == 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s <seconds> [stdin]\n", argv[0]);
		return 2;
	}
	steps[0] = step_a;
	steps[1] = step_b;
	steps[2] = step_c;
	steps[3] = step_d;
	if (gate && !fgets(line, sizeof(line), stdin))
		return 1;
	end = now_ns() + (unsigned long long)(atof(argv[1]) * 1e9);
	while (now_ns() < end)
		acc += steps[xorshift(&seed) & 3]((int)(xorshift(&seed) % 64), &seed);
	printf("done %llu\n", acc & 1);
	fflush(stdout);
	if (gate && !fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
