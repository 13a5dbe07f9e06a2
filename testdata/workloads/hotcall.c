// Workload of the probe rate limit tests: calls hot_call() in a tight loop
// for a given wall time, far more often than a probe's max_per_second.
//
//   hotcall <seconds> [stdin]
//
// With "stdin" it starts after reading a line from stdin (so probes can be
// attached first). When done it prints "calls <n> <first_ns> <last_ns>":
// the number of calls and the CLOCK_MONOTONIC times around the first and
// last call; then, with "stdin", it waits for a second line before exiting.
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

__attribute__((noinline)) unsigned long hot_call(unsigned long x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 2654435761ul + 1;
}

int main(int argc, char **argv)
{
	char line[16];
	int gate = argc > 2 && strcmp(argv[2], "stdin") == 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s <seconds> [stdin]\n", argv[0]);
		return 2;
	}
	if (gate && !fgets(line, sizeof(line), stdin))
		return 1;

	unsigned long long first = now_ns(), end = first + (unsigned long long)(atof(argv[1]) * 1e9), last;
	unsigned long calls = 0, acc = 1;
	do {
		acc = hot_call(acc);
		calls++;
		last = now_ns();
	} while (last < end);
	printf("calls %lu %llu %llu\n", calls, first, last);
	fprintf(stderr, "checksum %lu\n", acc);
	fflush(stdout);
	if (gate && !fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
