// probeloop: calls one tiny function, probed_call(), a fixed number of times
// in a tight loop, used by `make bench` (suite probes) to measure what a
// uprobe pair on that function costs per call.
//
// Usage: probeloop [calls] [start]
//   calls  number of calls (default 200000)
//   start  "stdin": read one line from stdin before the loop (so a tracer
//          can attach to the running process first); a number: sleep that
//          many milliseconds first; default 0.
// Prints the loop's wall time in nanoseconds on stdout (one line). On stderr
// it prints a checksum, so the compiler cannot drop the calls, and
// "probeloop: cpu_ns N", the CPU time (user+system) of the process.
//
// Build: cc -O2 -g -fno-omit-frame-pointer -pthread -o probeloop probeloop.c
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DEFAULT_CALLS 200000UL

// The probed function: a few instructions, never inlined, never merged.
__attribute__((noinline)) uint64_t probed_call(uint64_t x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 0x9e3779b97f4a7c15ULL + 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ULL +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ULL;
}

int main(int argc, char **argv)
{
	unsigned long calls = DEFAULT_CALLS;
	if (argc > 1) {
		char *end;
		calls = strtoul(argv[1], &end, 10);
		if (*end != '\0' || calls == 0) {
			fprintf(stderr, "probeloop: bad call count %s\n", argv[1]);
			return 2;
		}
	}
	if (argc > 2) {
		if (strcmp(argv[2], "stdin") == 0) {
			char line[64];
			if (!fgets(line, sizeof(line), stdin)) {
				fprintf(stderr, "probeloop: stdin closed before the start line\n");
				return 2;
			}
		} else {
			long ms = strtol(argv[2], NULL, 10);
			struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
			while (ms > 0 && nanosleep(&ts, &ts) != 0)
				;
		}
	}

	uint64_t cpu0 = cpu_ns();
	uint64_t start = now_ns();
	uint64_t acc = 1;
	for (unsigned long i = 0; i < calls; i++)
		acc = probed_call(acc);
	uint64_t wall = now_ns() - start;
	uint64_t cpu = cpu_ns() - cpu0;

	fprintf(stderr, "probeloop: checksum %llu\n", (unsigned long long)acc);
	fprintf(stderr, "probeloop: cpu_ns %llu\n", (unsigned long long)(cpu ? cpu : 1));
	printf("%llu\n", (unsigned long long)wall);
	return 0;
}
