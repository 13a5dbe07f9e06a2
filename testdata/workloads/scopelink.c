// Workload of the scope linking tests: a probed function, handle(), that
// either burns 45 ms of CPU in slow_path() and then sleeps 5 ms (a scope
// that lasts 50 ms), or burns 1 ms in fast_path(). Each cycle of 8 calls:
//
//   caller_a: fast, slow, fast, slow, fast, slow, fast
//   caller_b: slow
//
// so with a min_duration between 1 and 50 ms only the slow scopes make
// records, entered 3:1 from caller_a and caller_b by total duration.
//
//   scopelink <cycles> <delay ms>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

__attribute__((noinline)) static void burn(int ms)
{
	unsigned long long end = now_ns() + (unsigned long long)ms * 1000000ull;
	while (now_ns() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

__attribute__((noinline)) void slow_path(void)
{
	burn(45);
	sleep_ms(5);
}

__attribute__((noinline)) void fast_path(void)
{
	burn(1);
}

__attribute__((noinline)) void handle(int slow)
{
	if (slow)
		slow_path();
	else
		fast_path();
	sink++;
}

__attribute__((noinline)) void caller_a(int slow)
{
	handle(slow);
	sink++;
}

__attribute__((noinline)) void caller_b(int slow)
{
	handle(slow);
	sink++;
}

int main(int argc, char **argv)
{
	int cycles = argc > 1 ? atoi(argv[1]) : 20;

	sleep_ms(argc > 2 ? atoi(argv[2]) : 0);
	for (int c = 0; c < cycles; c++) {
		for (int i = 0; i < 7; i++)
			caller_a(i % 2);
		caller_b(1);
	}
	return 0;
}
