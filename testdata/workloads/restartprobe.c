// restartprobe: a long-running process whose three functions are probed
// while collectors are started and killed around it (test/e2e's restart
// hygiene fault). It must come out unharmed: every call returns what it
// computes, and no breakpoint a dead collector left behind stops it.
//
// Usage: restartprobe <status file>
// Prints "ready", then one line per probed function, "<name> 0x<address>",
// so the test can read the function's first instruction from
// /proc/<pid>/mem (a uprobe replaces it with a breakpoint while attached).
// Every second it rewrites the status file with "calls N wrong M": the calls
// made and those whose result was not the expected one.
//
// Build: cc -O2 -g -fno-omit-frame-pointer -o restartprobe restartprobe.c
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

// Off the CPU for 3 ms: a scope that is open when a collector dies.
__attribute__((noinline)) uint64_t fault_sleep(uint64_t x)
{
	sleep_us(3000);
	__asm__ volatile("" : "+r"(x));
	return x * 3 + 1;
}

// On the CPU for 2 ms.
__attribute__((noinline)) uint64_t fault_spin(uint64_t x)
{
	uint64_t end = now_ns() + 2000000, h = x;
	while (now_ns() < end)
		h = h * 0x9e3779b97f4a7c15ULL + 1;
	__asm__ volatile("" : "+r"(h));
	return x * 5 + 2;
}

// Calls the other two: nested scopes, return addresses of both in flight.
__attribute__((noinline)) uint64_t fault_outer(uint64_t x)
{
	uint64_t r = fault_sleep(x) + fault_spin(x);
	__asm__ volatile("" : "+r"(r));
	return r;
}

int main(int argc, char **argv)
{
	uint64_t calls = 0, wrong = 0, last = now_ns();
	FILE *status;

	if (argc != 2) {
		fprintf(stderr, "usage: %s <status file>\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	printf("fault_sleep %p\n", (void *)fault_sleep);
	printf("fault_spin %p\n", (void *)fault_spin);
	printf("fault_outer %p\n", (void *)fault_outer);
	for (uint64_t i = 0;; i++) {
		if (fault_outer(i) != i * 8 + 3)
			wrong++;
		calls++;
		sleep_us(5000);
		if (now_ns() - last >= 1000000000ULL) {
			status = fopen(argv[1], "w");
			if (!status)
				return 1;
			fprintf(status, "calls %llu wrong %llu\n", (unsigned long long)calls,
				(unsigned long long)wrong);
			fclose(status);
			last = now_ns();
		}
	}
}
