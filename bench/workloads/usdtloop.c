// usdtloop: calls one tiny function, usdt_call(), a fixed number of times in
// a tight loop, used by `make bench` (suite usdt) to measure what a probe
// on it costs per call: the function is probeable by symbol (entry and
// return) and carries a USDT pair of its own, usdtloop:call__start (its
// argument x) at its entry and usdtloop:call__done at its exit, without
// semaphores (each site is a nop that is always there).
//
// Usage: usdtloop [calls] [start], as probeloop.c: calls (default 200000);
// start "stdin" reads one line from stdin before the loop (so a tracer can
// attach to the running process first). Prints the loop's wall time in
// nanoseconds on stdout (one line); on stderr a checksum and
// "usdtloop: cpu_ns N", the CPU time (user+system) of the process.
//
// Build: cc -O2 -g -fno-omit-frame-pointer -pthread -o usdtloop usdtloop.c
// (<sys/sdt.h>: Debian's systemtap-sdt-dev).
#include <sys/sdt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DEFAULT_CALLS 200000UL

// The probed function: a few instructions between its two USDT sites,
// never inlined, never merged.
__attribute__((noinline)) uint64_t usdt_call(uint64_t x)
{
	STAP_PROBE1(usdtloop, call__start, x);
	__asm__ volatile("" : "+r"(x));
	x = x * 0x9e3779b97f4a7c15ULL + 1;
	STAP_PROBE1(usdtloop, call__done, x);
	return x;
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
			fprintf(stderr, "usdtloop: bad call count %s\n", argv[1]);
			return 2;
		}
	}
	if (argc > 2 && strcmp(argv[2], "stdin") == 0) {
		char line[64];
		if (!fgets(line, sizeof(line), stdin)) {
			fprintf(stderr, "usdtloop: stdin closed before the start line\n");
			return 2;
		}
	}

	uint64_t cpu0 = cpu_ns();
	uint64_t start = now_ns();
	uint64_t acc = 1;
	for (unsigned long i = 0; i < calls; i++)
		acc = usdt_call(acc);
	uint64_t wall = now_ns() - start;
	uint64_t cpu = cpu_ns() - cpu0;

	fprintf(stderr, "usdtloop: checksum %llu\n", (unsigned long long)acc);
	fprintf(stderr, "usdtloop: cpu_ns %llu\n", (unsigned long long)(cpu ? cpu : 1));
	printf("%llu\n", (unsigned long long)wall);
	return 0;
}
