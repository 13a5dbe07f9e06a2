// dlchain: a library dlburn loads with dlopen once it has run for a while,
// for the unwinder's tests: a known chain in code without frame pointers
// that was in no mapping when the process was first read.
// cflags: -O2 -fomit-frame-pointer -shared -fPIC
//
// dl_entry -> dl_mid -> dl_leaf, until SECONDS have passed.
#include <stdint.h>
#include <time.h>

static volatile uint64_t sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void dl_leaf(void)
{
	for (uint64_t i = 0; i < 200000; i++)
		sink += i * i;
}

/* Work after each call keeps them calls, not jumps. */
__attribute__((noinline)) void dl_mid(void)
{
	dl_leaf();
	sink++;
}

__attribute__((noinline)) void dl_entry(double seconds)
{
	double until = now() + seconds;

	while (now() < until) {
		dl_mid();
		sink++;
	}
}
